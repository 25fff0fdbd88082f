"""Generic tiles that know no protocol: forwarding placeholders, external NoC ports, frame ports."""

from .forward import ForwardTile
from .port import PortTile
from .frame_port import FramePortTile

__all__ = ["ForwardTile", "PortTile", "FramePortTile"]
