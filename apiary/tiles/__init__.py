"""Generic tiles that know no protocol: forwarding placeholders, external NoC ports, frame
ports, NoC messages as frames."""

from .forward import ForwardTile
from .port import PortTile
from .frame_port import FramePortTile
from .raw_port import RawPortTile

__all__ = ["ForwardTile", "PortTile", "FramePortTile", "RawPortTile"]
