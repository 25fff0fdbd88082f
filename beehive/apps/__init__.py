"""Application tiles that sit on top of the Beehive protocol tiles."""

from .echo import UdpEchoTile

__all__ = ["UdpEchoTile"]
