"""Protocol-free packet streams: what every layer above is built from.

Nothing here knows about the NoC or any protocol. Imports: Amaranth only.

* :mod:`~apiary.stream.layout`: the payload stream (``data``, ``nbytes``, ``last``), widths.
* :mod:`~apiary.stream.header`: MSB-first bit-field headers and their views on streams.
* :mod:`~apiary.stream.lanes`: byte-lane masks and shifts.
* :mod:`~apiary.stream.queue`: :class:`Queue`, a FIFO between two streams;
  :func:`register_stream`.
* :mod:`~apiary.stream.realign`: strip or insert bytes at a packet's front.
* :mod:`~apiary.stream.packet_buffer`: store-and-forward with a per-packet verdict.
* :mod:`~apiary.stream.peek`: look at a packet's first bytes, then forward or drop it.
* :mod:`~apiary.stream.checksum`: the Internet checksum, in Python and in hardware.
* :mod:`~apiary.stream.hold`: register stages for logic whose inputs hold still.
* :mod:`~apiary.stream.counters`: counters declared as a signature.
* :mod:`~apiary.stream.registers`: run-time registers and tables declared as a signature.
* :mod:`~apiary.stream.struct_values`: a dataclass view of a struct layout (pack, unpack).
* :mod:`~apiary.stream.mac`: the MAC edge (byte enables, padding, FCS errors, clock crossing).
* :mod:`~apiary.stream.testbench`: async testbench helpers.
"""

from .layout import (SUPPORTED_WIDTHS, check_width, payload_layout, payload_signature,
                     payload_words, abort_nbytes)
from .header import Header, byte_reverse, header_view, header_signal
from .queue import Queue, register_stream
from .realign import StreamStrip, StreamInsert
from .packet_buffer import PacketBuffer
from .peek import PayloadPeek
from .checksum import (ones_complement_sum, internet_checksum, fold16, ones_sum, word_sum,
                       InternetChecksum)
from .hold import HeldStages
from .counters import CounterSignature
from .mac import FrameStream, MacPort, MacOptions, MacEdge

__all__ = ["SUPPORTED_WIDTHS", "check_width", "payload_layout", "payload_signature",
           "payload_words", "abort_nbytes", "Header", "byte_reverse", "header_view",
           "header_signal", "Queue", "register_stream", "StreamStrip", "StreamInsert",
           "PacketBuffer", "PayloadPeek",
           "ones_complement_sum", "internet_checksum", "fold16", "ones_sum", "word_sum",
           "InternetChecksum", "HeldStages", "CounterSignature", "FrameStream", "MacPort",
           "MacOptions", "MacEdge"]
