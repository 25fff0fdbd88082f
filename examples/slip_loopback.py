"""The smallest board design: every SLIP packet that comes in on the UART goes back out.

``slip_rx`` (0,0) decodes SLIP frames from the serial line and sends each as one NoC message to
``slip_tx`` (1,0), which encodes it back onto the line. It is what CI builds into an iCE40
bitstream end to end, to keep the amaranth-boards flow from rotting::

    apiary build examples/slip_loopback.py --platform amaranth:icebreaker

On the board, anything SLIP-framed written to the UART comes back (``slattach`` plus ``ping``
sees its own requests). ``design(width=64, clock_hz=12_000_000, baud=115200)``.
"""

from apiary.design import Design
from beehive.proto.ethernet import EtherType
from beehive.serial.slip import SlipRxTile, SlipTxTile


def design(width=64, clock_hz=12_000_000, baud=115200):
    d = Design("slip_loopback", cols=2, rows=1, width=width)
    d.settings.update(clock_hz=clock_hz)
    d.add("slip_rx", SlipRxTile, at=(0, 0), baud=baud)
    d.add("slip_tx", SlipTxTile, at=(1, 0), baud=baud)
    d.route("slip_rx", "slip_tx", key=EtherType.IPV4.value)
    return d
