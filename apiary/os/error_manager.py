"""The error manager: the kernel's fault log, read back with messages, and the release of
quarantined tiles.

Messages (every one carries :data:`~apiary.os.uapi.KERNEL_META` as ``meta_bits=`` metadata:
inline in the header flit at 512 bits, 3 metadata flits after the header at 64; see
:func:`~apiary.noc.framing.meta_plan`; no payload, and any payload a message brings is
discarded):

===============  ====  ====================  =====================================================
message          type  from → to             what the error manager does
===============  ====  ====================  =====================================================
``FAULT``        43    monitor → error mgr   logs the message's ``src_x/y`` (the faulting tile)
                                             with its ``op`` (a :class:`~apiary.os.uapi.FaultKind`),
                                             ``handle``, ``addr``, ``size``, ``perm``,
                                             ``peer_x/y/fbits`` and ``user``; no reply
``FAULT_READ``   46    any → error mgr       ``handle`` = index into the log; answered with
                                             ``FAULT_ENTRY``
``FAULT_ENTRY``  47    error mgr → asker     to the request's ``src_x/y/fbits``: the logged
                                             fields, ``mem_x/y`` = the faulting tile, ``root`` =
                                             faults so far, ``status`` ``OK``; past the end of
                                             the log every field zero but ``root`` and ``status``
                                             = :data:`~apiary.os.uapi.Status.NO_ENTRY`
``RELEASE``      45    kernel → error mgr    ``peer_x/y/fbits`` name a tile: the message is
                                             forwarded, meta unchanged, to that tile's monitor
                                             (``dst`` = ``peer_x, peer_y, peer_fbits``); no reply
``RELEASE``      45    error mgr → monitor   (the forwarded message) reset the tile, lift its
                                             quarantine
===============  ====  ====================  =====================================================

**The log** holds the first ``log_depth`` faults, in arrival order, index 0 the oldest. Once it
is full the manager *keeps counting but stops storing*: later faults are counted (in the
``faults`` and ``dropped_log`` counters and in every ``FAULT_ENTRY``'s ``root``) and otherwise
lost; nothing is overwritten, so the log shows how trouble started. ``root`` is the number of
``FAULT`` messages received since reset, saturating at 65535, so a reader sees faults were lost
when ``root`` exceeds the entries it can read. ``handle`` is 8 bits, so the log holds at most
256 entries.

Messages of any other type are taken whole and dropped (counted in ``malformed``, with the
messages the :class:`~apiary.noc.framing.MessageReceiver` drops: truncated, or with the wrong
``metadata_flits``); the next message is served normally.
"""

from typing import Any

from amaranth import Module, Signal, Mux
from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory

from ..noc.framing import offer_message
from ..noc.header import Fbits
from ..tile import Receive, Send, Tile, TileEnv
from .uapi import KERNEL_FORMAT, KERNEL_META, KernelMsgType, Status
from ..stream.counters import count


__all__ = ["ErrorManagerTile", "LOG_ENTRY", "MAX_LOG_DEPTH"]


#: One entry of the fault log: the faulting tile and the fields a ``FAULT`` uses.
LOG_ENTRY = data.StructLayout({
    "tile_x": unsigned(8), "tile_y": unsigned(8),
    "handle": unsigned(8), "addr": unsigned(48), "size": unsigned(40), "perm": unsigned(2),
    "peer_x": unsigned(8), "peer_y": unsigned(8), "peer_fbits": unsigned(4),
    "op": unsigned(6), "user": unsigned(32),
})

#: Entries a ``FAULT_READ``'s 8-bit ``handle`` can index.
MAX_LOG_DEPTH = 1 << KERNEL_META["handle"].width

_FAULT = KernelMsgType.FAULT.value
_FAULT_READ = KernelMsgType.FAULT_READ.value
_FAULT_ENTRY = KernelMsgType.FAULT_ENTRY.value
_RELEASE = KernelMsgType.RELEASE.value
_COPIED = ("handle", "addr", "size", "perm", "peer_x", "peer_y", "peer_fbits", "op", "user")


class ErrorManagerTile(Tile):
    """Log the faults monitors report, answer reads of the log, forward releases (see the
    module docstring for the messages).

    One message at a time, in arrival order::

        noc_in ─▶ MessageReceiver ─▶ decode ─┬▶ FAULT: write the log (a Memory), count
                                             ├▶ FAULT_READ: read the log ─▶ FAULT_ENTRY ─┐
                                             └▶ RELEASE: forward ────────────────────────┴▶ noc_out

    Latency: a ``FAULT`` is logged in the cycle its last header/metadata flit is taken, and the
    next message may follow at once (one ``FAULT`` per message time, no idle cycle). A
    ``FAULT_READ``'s reply (or a forwarded ``RELEASE``) has its first flit offered on
    ``noc_out`` in the cycle after the request's last flit was taken; the tile takes nothing
    more until the reply's last flit has left, so it holds its input while it waits for its
    output (``streaming``).

    Parameters
    ----------
    env : TileEnv
        The tile's place; it needs no routes (replies go to each request's source, releases
        to the tile a request names).
    log_depth : int
        Entries of the log, 1 to 256 (``FAULT_READ`` indexes it with an 8-bit ``handle``).
        Each entry is :data:`LOG_ENTRY` (172 bits) in one ``Memory`` (block RAM).

    Counters: ``faults`` (``FAULT`` messages received, stored or not), ``dropped_log`` (faults
    not stored because the log was full), ``reads`` (``FAULT_READ`` answered, past the end
    included), ``releases`` (``RELEASE`` forwarded), ``malformed`` (messages dropped: of
    another type, or dropped by the receiver).

    Raises
    ------
    ValueError
        If ``log_depth`` is not an integer from 1 to 256.
    """

    #: The tile holds a request while its reply leaves.
    streaming = True

    inputs = (Receive("requests", KernelMsgType.FAULT, KernelMsgType.FAULT_READ,
                      KernelMsgType.RELEASE, meta=KERNEL_FORMAT),)
    outputs = (Send("replies", KernelMsgType.FAULT_ENTRY, KernelMsgType.RELEASE,
                    meta=KERNEL_FORMAT),)

    def __init__(self, env: TileEnv | None = None, *, log_depth: int = 64) -> None:
        if (not isinstance(log_depth, int) or isinstance(log_depth, bool)
                or not 1 <= log_depth <= MAX_LOG_DEPTH):
            raise ValueError(f"log_depth must be an integer from 1 to {MAX_LOG_DEPTH} (a "
                             f"FAULT_READ names an entry by its 8-bit handle), not {log_depth!r}")
        self.log_depth = log_depth
        super().__init__(env, counters={
            "faults": "FAULT messages received (stored in the log or not)",
            "dropped_log": "faults not stored because the log was full (still counted in "
                           "faults and in FAULT_ENTRY's root)",
            "reads": "FAULT_READ requests answered (past the end of the log included)",
            "releases": "RELEASE requests forwarded to a tile's monitor",
            "malformed": "messages dropped: of a type the error manager does not take, or "
                         "dropped by the receiver (truncated, wrong metadata_flits)",
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        depth = self.log_depth
        counters = self.counters

        ports = self.message_ports(m)
        rx, tx = ports.requests, ports.replies
        m.d.comb += rx.o_data.ready.eq(1)          # kernel messages have no payload: discarded
        bad_type = Signal(32)
        m.d.comb += counters.malformed.eq(rx.errors + bad_type)

        hdr = rx.o_hdr.payload
        req = data.View(KERNEL_META, hdr.meta)
        taken = rx.o_hdr.valid & rx.o_hdr.ready

        # -- the log -------------------------------------------------------------------------------
        m.submodules.log = log = Memory(shape=LOG_ENTRY, depth=depth, init=[])
        wr = log.write_port()
        rd = log.read_port()
        stored = Signal(range(depth + 1))           # entries in the log
        total = Signal(16)                          # faults received, saturating
        full = Signal()
        m.d.comb += full.eq(stored == depth)
        entry = wr.data
        m.d.comb += [
            wr.addr.eq(stored),
            entry.tile_x.eq(hdr.src_x), entry.tile_y.eq(hdr.src_y),
            *(getattr(entry, name).eq(getattr(req, name)) for name in _COPIED),
            rd.addr.eq(req.handle),
        ]

        # -- the reply or forwarded message --------------------------------------------------------
        r_type = Signal(8)
        r_dst = Signal(data.StructLayout({"x": 8, "y": 8, "fbits": 4}))
        r_meta = Signal(KERNEL_META)                # a RELEASE's, forwarded
        r_hit = Signal()                            # the index read is in the log
        reply = Signal(KERNEL_META)                 # a FAULT_ENTRY's
        got = rd.data
        with m.If(r_hit):
            m.d.comb += [
                *(getattr(reply, name).eq(getattr(got, name)) for name in _COPIED),
                reply.mem_x.eq(got.tile_x), reply.mem_y.eq(got.tile_y),
                reply.status.eq(Status.OK),
            ]
        with m.Else():
            m.d.comb += reply.status.eq(Status.NO_ENTRY)
        m.d.comb += reply.root.eq(total)
        sending = Signal()
        ready = offer_message(m, tx, sending, dst=(r_dst.x, r_dst.y, r_dst.fbits),
                              src=(self.env.x, self.env.y, Fbits.LOCAL0), msg_type=r_type,
                              meta=Mux(r_type == _FAULT_ENTRY, reply, r_meta))

        with m.FSM(name="error_manager"):
            with m.State("IDLE"):
                m.d.comb += rx.o_hdr.ready.eq(1)
                with m.If(taken):
                    with m.Switch(hdr.msg_type):
                        with m.Case(_FAULT):
                            m.d.sync += [
                                counters.faults.eq(counters.faults + 1),
                                total.eq(total + (total != 0xFFFF)),
                            ]
                            with m.If(full):
                                count(m, counters.dropped_log)
                            with m.Else():
                                m.d.comb += wr.en.eq(1)
                                m.d.sync += stored.eq(stored + 1)
                        with m.Case(_FAULT_READ):
                            m.d.sync += [
                                counters.reads.eq(counters.reads + 1),
                                r_type.eq(_FAULT_ENTRY), r_hit.eq(req.handle < stored),
                                r_dst.x.eq(hdr.src_x), r_dst.y.eq(hdr.src_y),
                                r_dst.fbits.eq(hdr.src_fbits),
                            ]
                            m.next = "SEND"
                        with m.Case(_RELEASE):
                            m.d.sync += [
                                counters.releases.eq(counters.releases + 1),
                                r_type.eq(_RELEASE), r_meta.eq(req),
                                r_dst.x.eq(req.peer_x), r_dst.y.eq(req.peer_y),
                                r_dst.fbits.eq(req.peer_fbits),
                            ]
                            m.next = "SEND"
                        with m.Default():
                            m.d.sync += bad_type.eq(bad_type + 1)
            with m.State("SEND"):
                m.d.comb += sending.eq(1)
                with m.If(ready):
                    m.next = "IDLE"
        # Read only when a FAULT_READ is taken, so the entry stays on rd.data while its reply
        # waits (a read port's enable is 1 unless driven).
        m.d.comb += rd.en.eq(taken & (hdr.msg_type == _FAULT_READ))
        return m
