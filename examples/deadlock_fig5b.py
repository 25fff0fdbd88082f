"""The Beehive paper's Fig. 5b: the UDP receive path of Fig. 5a, laid out in chain order.

With ``eth (0,0) · ip (1,0) · udp (2,0) · app (3,0)`` every hop of the chain
Ethernet → IP → UDP → application goes east over links the message has not used yet, so the
message acquires its resources in one order and cannot wait for itself (paper §IV-E: "Beehive
takes advantage of protocol layer ordering, so a packet always acquires NoC resources in the
same order")::

    apiary check examples/deadlock_fig5b.py        # exit 0, no deadlock
    apiary show  examples/deadlock_fig5b.py -o fig5b.svg

The IP and UDP tiles are :class:`~apiary.tiles.ForwardTile` placeholders; ``eth`` and ``app``
are :class:`~apiary.tiles.PortTile` so that a test bench can inject frames and collect them.
"""

from apiary.design import Design
from apiary.tiles import ForwardTile, PortTile


def design(width=512):
    d = Design("fig5b", cols=4, rows=1, width=width)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("ip", ForwardTile, at=(1, 0))
    d.add("udp", ForwardTile, at=(2, 0))
    d.add("app", PortTile, at=(3, 0))
    d.route("eth", "ip", key=0x0800)      # EtherType IPv4
    d.route("ip", "udp", key=17)          # IP protocol UDP
    d.route("udp", "app", key=7)          # UDP port 7 (echo)
    return d
