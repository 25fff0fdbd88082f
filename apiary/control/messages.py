"""The control plane's messages: read and write one 32-bit word of a tile's address map.

The control NoC (the ``ctl`` plane, 64 bits wide unless the design says otherwise) carries
register accesses from a controller to the *control agent* at each tile's position
(:class:`~apiary.control.agent.ControlAgent`, sub-port :data:`AGENT_FBITS`) and the agent's
answer back to the request's source. Every message is a header and one metadata word,
:data:`CTL_META`, and no payload (three flits at 64 bits):

===============  ====  ====================  ==========================================
message          type  from → to             fields of :data:`CTL_META`
===============  ====  ====================  ==========================================
``CTL_READ``     48    controller → agent    ``tag``, ``addr``
``CTL_WRITE``    49    controller → agent    ``tag``, ``addr``, ``data``
``CTL_ACK``      50    agent → controller    ``tag``, ``addr``, ``status``, ``data``
                                             (the word read; the word written, for a write)
===============  ====  ====================  ==========================================

An agent answers every request with exactly one ``CTL_ACK``, to the request's ``src_x``,
``src_y`` and ``src_fbits``, with the request's ``tag`` and ``addr``. The address map of a tile
(which word is which counter, register or table) is :mod:`apiary.control.addrmap`.
"""

from dataclasses import dataclass

from amaranth.lib import enum

from ..noc.framing import decode_struct_message, struct_message_flits
from ..noc.header import Fbits, NocHeader
from ..noc.msgtype import register_msg_types
from ..noc.spec import register_formats
from ..stream.format import Field, Format
from ..stream.struct_values import StructValues


__all__ = ["CtlMsgType", "CTL_READ", "CTL_WRITE", "CTL_ACK", "CtlStatus", "CTL_FORMAT", "CTL_META",
           "CtlMeta",
           "AGENT_FBITS", "ctl_message_flits", "decode_ctl_message"]


@register_msg_types
class CtlMsgType(enum.Enum, shape=8):
    """The control plane's message types."""
    CTL_READ  = 48
    CTL_WRITE = 49
    CTL_ACK   = 50


#: The same values as plain integers.
CTL_READ, CTL_WRITE, CTL_ACK = 48, 49, 50


class CtlStatus(enum.IntEnum):
    """``status`` of a ``CTL_ACK``."""
    OK = 0
    BAD_ADDR = 1        # no word at this address
    READ_ONLY = 2       # a write to a counter or a read-only table's word


#: The one metadata word of every control message (``data`` in the least significant bits).
CTL_FORMAT = Format("ctl_meta", [
    Field("data", 32, "the word read or written"),
    Field("addr", 16, "word address in the tile's address map"),
    Field("tag", 8, "the controller's request number, copied into the answer"),
    Field("status", 4, "in CTL_ACK: the outcome", values=CtlStatus),
], order="lsb", doc="The metadata of every control-plane message.")
CTL_META = CTL_FORMAT.layout()
register_formats(CtlMsgType, CTL_FORMAT)

#: The sub-port (``dst_fbits``) of the control agent at every tile's position; a tile that
#: attaches to the control plane itself (a controller) is reached on the others.
AGENT_FBITS = Fbits.LOCAL3


@dataclass
class CtlMeta(StructValues, layout=CTL_META):
    """Python view of :data:`CTL_META` (``pack``, ``unpack``: see
    :class:`~apiary.stream.struct_values.StructValues`)."""
    data: int = 0
    addr: int = 0
    tag: int = 0
    status: int = 0


def ctl_message_flits(width: int, msg_type: int | CtlMsgType, meta: CtlMeta, *,
                      dst: tuple = (0, 0), src: tuple = (0, 0), dst_fbits: int = AGENT_FBITS,
                      src_fbits: int = Fbits.LOCAL0) -> list[tuple[int, int]]:
    """The flits (``(data, last)`` pairs) of a control message at ``width`` bits."""
    return struct_message_flits(width, msg_type, meta, dst=dst, src=src, dst_fbits=dst_fbits,
                                src_fbits=src_fbits)


def decode_ctl_message(flits: list, width: int) -> tuple[NocHeader, CtlMeta]:
    """``(header, meta)`` of a control message's flits."""
    return decode_struct_message(flits, width, CtlMeta)
