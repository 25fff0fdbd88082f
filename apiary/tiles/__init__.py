"""Generic tiles that know no protocol: forwarding placeholders and external NoC ports."""

from .forward import ForwardTile
from .port import PortTile
