"""Application tiles that sit on top of the Beehive protocol tiles."""

from .controller import ControllerTile
from .busy_echo import UdpBusyEchoTile
from .echo import UdpEchoTile
from .tcp_datagram import TcpDatagramTile
from .tcp_echo import TcpEchoTile
from .tcp_sender import TcpSenderTile
from .tcp_sink import TcpSinkTile

__all__ = ["ControllerTile", "UdpBusyEchoTile", "UdpEchoTile", "TcpDatagramTile", "TcpEchoTile",
           "TcpSenderTile", "TcpSinkTile"]
