"""IP over a serial line, for boards whose only link to a host is a UART: the UART itself
(:mod:`~beehive.serial.uart`, the physical layer) and SLIP framing tiles
(:mod:`~beehive.serial.slip`) that stand where Ethernet RX and TX stand on boards with a MAC."""

from .slip import SlipRxTile, SlipTxTile
from .uart import UartRx, UartTx

__all__ = ["SlipRxTile", "SlipTxTile", "UartRx", "UartTx"]
