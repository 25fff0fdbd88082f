"""The Apiary kernel's message interface ("uAPI"): every kernel message type, their one metadata
layout, capability handles and virtual addresses, permissions and fault kinds.

An accelerator imports this module and nothing else of the kernel (the thesis's SystemVerilog
package files, §3.4.4). Every kernel message carries :data:`KERNEL_META` (192 bits) as
``meta_bits=`` metadata (inline in the header flit at 512 bits, 3 metadata flits at 64) and no
payload; a field a message does not use is zero.

=================  ====  =====================  ====================================================
message            type  from → to              fields of ``KERNEL_META`` it uses
=================  ====  =====================  ====================================================
``CAP_ALLOC``      32    tile → its monitor     ``size``, ``perm``, ``user``
``CAP_FREE``       33    tile → its monitor     ``handle``, ``user``
``CAP_SEND``       34    tile → its monitor     ``handle``, ``addr`` (offset into the segment),
                                                ``size``, ``perm``, ``peer_x/y/fbits`` (the tile
                                                to receive it), ``user``
``CAP_RESULT``     35    monitor → its tile     ``op`` (32-34: what it answers), ``status``,
                                                ``handle``, ``size``, ``perm``, ``user``
``CAP_NOTIFY``     36    monitor → its tile     a capability was sent to it: ``handle`` (its own
                                                new handle), ``size``, ``perm``, ``peer_x/y``
                                                (the sender), ``user`` (the sender's word)
``MM_ALLOC``       37    monitor → manager      ``size``, ``perm``, ``user``
``MM_FREE``        38    monitor → manager      ``root``
``MM_DERIVE``      39    monitor → manager      ``addr`` (physical base), ``size``, ``perm``,
                                                ``mem_x/y``, ``root``, ``peer_x/y/fbits`` (to),
                                                ``user``
``CAP_INSTALL``    40    manager → monitor      ``op`` (``CAP_ALLOC``: an allocation for the
                                                tile; ``CAP_SEND``: a capability sent to it),
                                                ``status``, ``addr``, ``size``, ``perm``,
                                                ``mem_x/y``, ``root``, ``peer_x/y`` (for
                                                ``CAP_SEND``: the sender), ``user``
``CAP_REVOKE``     41    manager → monitor      ``root``: drop every entry derived from it
``CAP_REVOKED``    42    monitor → manager      ``root``: done
``FAULT``          43    monitor → error mgr    ``op`` (a :class:`FaultKind`), ``handle``,
                                                ``addr``, ``size``, ``perm``, ``peer_x/y/fbits``
                                                (the offending message's destination, or for an
                                                inbound fault its source), ``user``
                                                (``msg_type | inbound << 8``)
``IPC_GRANT``      44    kernel → monitor       ``status`` (1 add, 0 remove), ``perm``
                                                (:class:`IpcDir`), ``peer_x/y/fbits``
``RELEASE``        45    error mgr → monitor    reset the tile and lift its quarantine
``FAULT_READ``     46    any → error mgr        ``handle`` = index into the fault log
``FAULT_ENTRY``    47    error mgr → asker      the logged ``FAULT`` meta; ``mem_x/y`` = the
                                                faulting tile; ``root`` = faults logged so far;
                                                ``status`` :data:`Status.NO_ENTRY` past the end
``TLB_MISS``       60    monitor → manager      paged translation: see :mod:`apiary.os.paging`
``TLB_FILL``       61    manager → monitor      paged translation: see :mod:`apiary.os.paging`
=================  ====  =====================  ====================================================

**Handles and virtual addresses.** A tile names a memory segment by an 8-bit *handle*: the entry
of its monitor's capability table in the low ``slot_bits`` bits, a generation count above, bumped
every time the entry is freed or revoked, so a handle kept past ``free`` is *stale* and refused.
A load or store from an untrusted tile addresses ``handle << 40 | offset``
(:func:`virtual_address`): the monitor checks ``offset`` (and ``size``) against the segment,
translates to ``base + offset`` and steers the message to the segment's memory tile; the ack
comes back with the tile's own virtual address (the monitor keeps the handle in ``MEM_META.tag``
on the way).
"""

from dataclasses import dataclass

from amaranth.lib import enum

from ..noc.framing import decode_struct_message, struct_message_flits
from ..noc.header import Fbits, NocHeader
from ..noc.msgtype import register_msg_types
from ..noc.ports import Receive
from ..noc.spec import register_formats
from ..stream.format import Field, Format
from ..stream.struct_values import StructValues


__all__ = ["KernelMsgType", "KERNEL_FORMAT", "KERNEL_META", "Perm", "IpcDir", "Status", "FaultKind",
           "monitor_input",
           "KernelMeta", "kernel_message_flits", "decode_kernel_message",
           "HANDLE_BITS", "OFFSET_BITS", "virtual_address", "split_address"]


@register_msg_types
class KernelMsgType(enum.Enum, shape=8):
    CAP_ALLOC   = 32
    CAP_FREE    = 33
    CAP_SEND    = 34
    CAP_RESULT  = 35
    CAP_NOTIFY  = 36
    MM_ALLOC    = 37
    MM_FREE     = 38
    MM_DERIVE   = 39
    CAP_INSTALL = 40
    CAP_REVOKE  = 41
    CAP_REVOKED = 42
    FAULT       = 43
    IPC_GRANT   = 44
    RELEASE     = 45
    FAULT_READ  = 46
    FAULT_ENTRY = 47
    TLB_MISS    = 60    # paged translation (apiary/os/paging.py)
    TLB_FILL    = 61
    PAGE_MAP    = 62    # run-time page maps (apiary/os/paging.py): a trusted tile → manager
    PAGE_UNMAP  = 63
    TLB_SHOOTDOWN = 64  # manager → a paged monitor: forget every translation
    TLB_SHOOTDOWN_ACK = 65  # ... done, and none of its tile's loads and stores is in flight


#: Types a tile sends to its own monitor (the monitor consumes them).
TILE_OPS = (KernelMsgType.CAP_ALLOC, KernelMsgType.CAP_FREE, KernelMsgType.CAP_SEND)
#: Types only the kernel may send: an untrusted tile sending one faults (``FORGED``).
KERNEL_ONLY = tuple(t for t in KernelMsgType
                    if t not in TILE_OPS and t is not KernelMsgType.FAULT_READ)


class Perm(enum.IntFlag):
    """Memory permissions of a segment capability."""
    READ = 1
    WRITE = 2
    RW = 3


class IpcDir(enum.IntEnum):
    """Which way an IPC capability lets messages go (``IPC_GRANT.perm``)."""
    OUT = 1     # the tile may send to peer (x, y, fbits)
    IN = 2      # the tile may receive from peer (x, y) on its port fbits


class Status(enum.IntEnum):
    OK = 0
    NO_MEMORY = 1       # allocate: no free block large enough
    TABLE_FULL = 2      # the monitor's capability table has no free entry
    BAD_HANDLE = 3      # free/send of a handle that is not (or no longer) valid
    NO_ENTRY = 4        # FAULT_READ past the end of the log
    BAD_SIZE = 5        # allocate of 0 bytes or more than the largest block
    BUSY = 6            # PAGE_UNMAP while another one waits for its shootdown


class FaultKind(enum.IntEnum):
    """What a monitor reports in ``FAULT.op``."""
    NO_IPC_CAP = 1      # a message to a destination the tile holds no IPC capability for
    STALE_HANDLE = 2    # a load/store/send through a handle that is not valid (freed, revoked)
    OUT_OF_BOUNDS = 3   # a load/store outside its segment
    PERMISSION = 4      # a load without READ, a store without WRITE
    DERIVE_WIDER = 5    # CAP_SEND of a range or permissions beyond the parent capability
    RATE = 6            # sends over the tile's token bucket (``on_excess="fault"``)
    INBOUND = 7         # a message to the tile from a source it may not receive from
    FORGED = 8          # the tile sent a kernel-only message type
    MALFORMED = 9       # a message that ends inside its header or metadata
    PAGE_FAULT = 10     # (paged translation) a load/store to a page the tile was not given
    STALLED = 11        # the tile left a message it was offered untaken (MonitorConfig.stall_limit)
    UNFINISHED = 12     # the tile began a message and sent no more of it (stall_limit too)


#: One metadata format for every kernel message (``handle`` in the least significant bits).
KERNEL_FORMAT = Format("kernel_meta", [
    Field("handle", 8, "capability handle (slot, generation above); FAULT_READ: log index"),
    Field("addr", 48, "segment offset, physical base or faulting address"),
    Field("size", 40, "bytes"),
    Field("perm", 2, "Perm (1 read, 2 write); IPC_GRANT: IpcDir"),
    Field("mem_x", 8, "memory tile column; FAULT_ENTRY: the faulting tile's"),
    Field("mem_y", 8, "memory tile row; FAULT_ENTRY: the faulting tile's"),
    Field("root", 16, "the memory manager's allocation id; FAULT_ENTRY: faults logged"),
    Field("peer_x", 8, "the other tile's column"),
    Field("peer_y", 8, "the other tile's row"),
    Field("peer_fbits", 4, "the other tile's sub-port"),
    Field("op", 6, "CAP_RESULT/CAP_INSTALL: the type answered; FAULT: a FaultKind"),
    Field("status", 4, "the outcome; IPC_GRANT: 1 add, 0 remove", values=Status),
    Field("user", 32, "the requester's word, returned untouched"),
], order="lsb", doc="The metadata of every kernel message (the Apiary uAPI).")
KERNEL_META = KERNEL_FORMAT.layout()
register_formats(KernelMsgType, KERNEL_FORMAT)

def monitor_input(fbits: int = Fbits.LOCAL0) -> Receive:
    """The input by which a tile behind a monitor takes its monitor's ``CAP_RESULT`` and
    ``CAP_NOTIFY`` (:data:`KERNEL_FORMAT`), named ``monitor``: they arrive on LOCAL0 among the
    tile's own messages, so a tile declares it before the other input of that sub-port
    (:mod:`apiary.noc.ports` splits them by type), when it is untrusted."""
    return Receive("monitor", KernelMsgType.CAP_RESULT, KernelMsgType.CAP_NOTIFY,
                   meta=KERNEL_FORMAT, fbits=fbits)


#: Bits of a handle, and of the segment offset below it in a virtual address.
HANDLE_BITS = 8
OFFSET_BITS = 40


def virtual_address(handle: int, offset: int) -> int:
    """The 48-bit address an untrusted tile uses for byte ``offset`` of segment ``handle``."""
    if not 0 <= handle < 1 << HANDLE_BITS or not 0 <= offset < 1 << OFFSET_BITS:
        raise ValueError(f"handle {handle} / offset {offset} out of range")
    return handle << OFFSET_BITS | offset


def split_address(addr: int) -> tuple[int, int]:
    """``(handle, offset)`` of a virtual address."""
    return addr >> OFFSET_BITS, addr & (1 << OFFSET_BITS) - 1


@dataclass
class KernelMeta(StructValues, layout=KERNEL_META):
    """Python view of :data:`KERNEL_META` (tests, traces, the error log reader; ``pack``,
    ``unpack``: see :class:`~apiary.stream.struct_values.StructValues`)."""
    handle: int = 0
    addr: int = 0
    size: int = 0
    perm: int = 0
    mem_x: int = 0
    mem_y: int = 0
    root: int = 0
    peer_x: int = 0
    peer_y: int = 0
    peer_fbits: int = 0
    op: int = 0
    status: int = 0
    user: int = 0


def kernel_message_flits(width: int, msg_type: int | KernelMsgType, meta: KernelMeta, *,
                         dst: tuple = (0, 0), src: tuple = (0, 0), dst_fbits: int = Fbits.LOCAL0,
                         src_fbits: int = Fbits.LOCAL0) -> list[tuple[int, int]]:
    """The flits (``(data, last)`` pairs) of a kernel message at ``width`` bits."""
    return struct_message_flits(width, msg_type, meta, dst=dst, src=src, dst_fbits=dst_fbits,
                                src_fbits=src_fbits)


def decode_kernel_message(flits: list, width: int) -> tuple[NocHeader, KernelMeta]:
    """``(header, meta)`` of a kernel message's flits."""
    return decode_struct_message(flits, width, KernelMeta)
