"""The Beehive paper's Fig. 5a: a UDP receive path laid out so that it deadlocks.

A received frame is processed by Ethernet, then IP, then UDP, then the application. Here the
tiles sit in one row as ``eth (0,0) · udp (1,0) · ip (2,0) · app (3,0)``:

1. ``eth → ip`` travels east through the UDP tile's router, holding ``link (1,0)→E``;
2. ``ip → udp`` travels back west;
3. ``udp → app`` must go east again and needs ``link (1,0)→E``, which the first hop of the
   same message still holds (wormhole routing: a message holds every link from its head to its
   tail, and the tiles are cut-through, so the message's tail is still behind ``eth → ip``).

"The UDP RX tile must route east twice in one chain, and it cannot route east a second time"
(paper §IV-E). ``apiary check`` rejects this layout and names the cycle::

    apiary check examples/deadlock_fig5a.py

Compare ``deadlock_fig5b.py``, the same tiles in chain order. The IP and UDP tiles are
:class:`~apiary.tiles.ForwardTile` placeholders; ``eth`` and ``app`` are
:class:`~apiary.tiles.PortTile` so that a test bench can inject frames and collect them.
"""

from apiary.design import Design
from apiary.tiles import ForwardTile, PortTile


def design(width=512):
    d = Design("fig5a", cols=4, rows=1, width=width)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("udp", ForwardTile, at=(1, 0))
    d.add("ip", ForwardTile, at=(2, 0))
    d.add("app", PortTile, at=(3, 0))
    d.route("eth", "ip", key=0x0800)      # EtherType IPv4
    d.route("ip", "udp", key=17)          # IP protocol UDP
    d.route("udp", "app", key=7)          # UDP port 7 (echo)
    return d
