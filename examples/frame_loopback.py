"""A loopback: every Ethernet frame that enters the design comes back out unchanged.

``eth`` (0,0) is a :class:`~apiary.tiles.FramePortTile`, the design's Ethernet port; ``reflect``
(1,0) is a :class:`~apiary.tiles.ForwardTile` that sends every message straight back. A frame
taken on the design's MAC port ``eth_mac`` (its ``rx``) crosses the mesh to ``reflect`` and back
and leaves on the same port's ``tx``::

    apiary sim examples/frame_loopback.py --pcap-in in.pcap --pcap-out out.pcap

It is the design the simulation back ends are compared on (``tests/sim``).
"""

from apiary.design import Design
from apiary.tiles.forward import ForwardTile
from apiary.tiles.frame_port import FramePortTile


def design(width=64, max_frame=2048):
    d = Design("frame_loopback", cols=2, rows=1, width=width)
    d.add("eth", FramePortTile, at=(0, 0), max_frame=max_frame)
    d.add("reflect", ForwardTile, at=(1, 0))
    d.route("eth", "reflect")
    d.route("reflect", "eth")
    return d
