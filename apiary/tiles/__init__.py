"""Generic tiles that know no protocol: forwarding placeholders, external NoC ports, frame
ports, NoC messages as frames, control messages as frames, a logging tile."""

from .forward import ForwardTile
from .port import PortTile
from .frame_port import FramePortTile
from .raw_port import RawPortTile
from .ctl_port import ControlPortTile
from .log import LogTile

__all__ = ["ForwardTile", "PortTile", "FramePortTile", "RawPortTile", "ControlPortTile", "LogTile"]
