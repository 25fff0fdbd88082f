"""The Apiary monitor: the trusted guard between an untrusted tile and its router.

Every message the tile sends and every message sent to it passes through the monitor, which
holds the tile's capabilities (formats in :mod:`apiary.os.uapi`):

* **IPC capabilities out**: ``(x, y, port)`` the tile may send to (a port of ``None``: any).
  Set from the design's grants (``Design.allow``) and changed at run time by ``IPC_GRANT``.
* **IPC capabilities in**: ``(x, y, port)``, a source the tile may receive from on one of its
  ports (beyond the thesis, which checked outgoing messages only). Set from the design's routes
  into the tile; messages from kernel tiles (memory manager, error manager, memory tiles) are
  always let in.
* **Segment capabilities**: ``entries`` rows of base, size, permissions, memory tile, root
  allocation, owner bit and generation, installed by the memory manager (``CAP_INSTALL``) and
  dropped by ``CAP_FREE`` and ``CAP_REVOKE``. The tile names one by its handle.

Outgoing, by type:

=========================  =====================================================================
``LOAD_MEM``/``STORE_MEM``  ``addr`` is virtual (``handle << 40 | offset``): the handle must be
                            valid and current, ``LOAD`` needs ``READ`` and ``STORE`` ``WRITE``,
                            and ``[offset, offset + size)`` (with ``wrap = k``: the ``2**k``-byte
                            ring around ``offset``, whose physical base must be ring aligned)
                            must lie in the segment. Passed with ``addr = base + offset``,
                            ``tag = handle`` and the segment's memory tile as destination.
``CAP_ALLOC/FREE/SEND``     Consumed: handled by the monitor with the memory manager
                            (``MM_*``); the tile gets ``CAP_RESULT``. ``CAP_SEND`` of a stale
                            handle, of a range or permissions beyond the parent, or to a tile
                            without an IPC capability, is a violation.
other kernel types          A violation (``FORGED``): only the kernel sends them.
anything else               Needs an IPC capability for its ``dst_x, dst_y, dst_fbits``;
                            passed unchanged.
=========================  =====================================================================

**Paged translation** (opt-in, ``MonitorConfig(tlbs=(TlbConfig(...), ...))``: Coyote's TLBs,
:mod:`apiary.os.paging`): loads and stores address plain virtual addresses, translated by
set-associative TLBs that the memory manager fills on a miss (``TLB_MISS``/``TLB_FILL``); an
access to a page the tile was not given is a ``PAGE_FAULT``, handled as any violation. A hit
adds at most 1 cycle (none when the address was on the link a cycle before the head is judged,
always so below 512 bits); segment translation stays the default.

Every message passed out leaves with the tile's own ``src_x, src_y``, whatever the tile wrote
there: a tile cannot have a memory tile's ack (or any reply) sent to another tile.

With a :class:`RateLimit`, every passed message costs ``msg_len + 1`` tokens (its flits) from a
token bucket; without enough the message waits (``on_excess="stall"``) or is a violation
(``"fault"``). A message of more flits than ``burst`` costs ``burst``: it waits for a full bucket.

Incoming: load and store acks from a memory tile get their virtual address back (from the handle
in ``tag``); ``CAP_INSTALL``, ``CAP_REVOKE``, ``IPC_GRANT`` and ``RELEASE`` from kernel tiles are
consumed; other messages need an IPC capability in. A message from a source the tile may not hear
is sunk and reported (``INBOUND``) but does not quarantine the tile: it is not the tile's fault.
(A denial while the monitor's queue of requests to the NoC is full, or while it walks its table
for ``RELEASE``, is sunk and counted, not reported.)

The incoming side never waits for the NoC while it holds a kernel message: what it sends
(``CAP_REVOKED``, ``MM_FREE``, ``FAULT``) goes through a queue of ``kernel_queue`` requests (16, as
many revocations as the memory manager can have outstanding by default), so a monitor adds no
in → out dependency to the deadlock check.

**A violation** sinks the whole message (nothing of it is forwarded), sends ``FAULT`` to the error
manager (the kind; for a load, store or ``CAP_SEND`` its handle, address, size and permissions
asked, otherwise zeros; the destination, for ``CAP_SEND`` the peer; the type) and quarantines
the tile: from then on every message from it and to it is sunk and counted, kernel messages to
the monitor excepted, and whatever was already on its way to the tile is drained, not delivered
(so a tile that stops reading holds up nothing behind it). ``RELEASE`` (through the error
manager) holds the tile in reset while the monitor gives back the memory it owns (``MM_FREE`` per
owned segment) and drops its segment capabilities, then lifts the quarantine (a ``RELEASE`` of a
tile that is not quarantined is ignored: resetting a tile in the middle of a message would cut
it). The rest of the NoC never notices.

**Revocation.** ``CAP_FREE`` of a handle drops the entry (its generation moves on, so the handle
is stale from then on) and, when the tile owns the segment, asks the manager to free it; the
manager revokes every copy derived from it first (``CAP_REVOKE`` to each holder, acked by
``CAP_REVOKED``), so no copy outlives the memory.

Cost: a message whose head is one flit (everything at 512 bits: header and metadata share the
flit) passes combinationally, **0 cycles** added. Below 512 bits a message waits while its head is
checked: header flits plus, for memory and capability messages, their metadata flits (at 64 bits
2, 4 and 5 flits): latency grows by one cycle per head flit and the link is idle that long, once
per message. Area (Yosys ``synth_xilinx``, default :class:`MonitorConfig`, ``apiary bench kernel
--area``): 4,614 LUTs, 48 LUTRAM, 2,855 FFs at 64 bits; 5,862 LUTs, 48 LUTRAM, 3,215 FFs at 512.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux, Array, ResetInserter
from amaranth.lib import data
from amaranth.lib.wiring import In, Out, Component, connect, flipped

from ..noc.flit import flit_layout, flit_signature
from ..noc.framing import MessageSender, meta_plan
from ..noc.gate import MessageGate, Verdict
from ..noc.header import Fbits, field_location, header_flits, noc_header
from ..noc.merger import MessageMerger
from ..noc.meter import FlitMeter, meter
from ..stream.counters import CounterSignature
from ..stream.queue import Queue
from ..tile import TileEnv
from .memory_tile import LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK
from .paging import PAGED_COUNTERS, PagedTranslation, check_tlbs
from .tlb import TlbConfig
from .uapi import (KERNEL_META, KERNEL_ONLY, OFFSET_BITS, HANDLE_BITS, FaultKind, IpcDir,
                   KernelMsgType as K, Perm, Status)
from ..stream.counters import count


__all__ = ["Monitor", "MonitorConfig", "RateLimit", "SEGMENT", "IPC_ENTRY"]


@dataclass(frozen=True)
class RateLimit:
    """A token bucket on a tile's sends, in flits: ``refill`` tokens every ``period`` cycles, at
    most ``burst`` held (the bucket starts full)."""
    burst: int
    refill: int = 1
    period: int = 1
    on_excess: str = "stall"

    def __post_init__(self) -> None:
        for name in ("burst", "refill", "period"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value < 1 << 24:
                raise ValueError(f"RateLimit {name} must be a positive integer, not {value!r}")
        if self.on_excess not in ("stall", "fault"):
            raise ValueError(f"RateLimit on_excess must be 'stall' or 'fault', not "
                             f"{self.on_excess!r}")


@dataclass(frozen=True)
class MonitorConfig:
    """Sizes of a monitor's tables, and its rate limit."""
    entries: int = 8            # segment capabilities (a power of two, 2 to 64)
    ipc_entries: int = 8        # IPC capabilities out
    in_entries: int = 8         # IPC capabilities in
    rate: RateLimit | None = None
    kernel_queue: int = 16      # the in side's requests to the NoC (>= the manager's holders)
    #: Paged translation of loads and stores (one TLB per page size) instead of segments;
    #: ``()``, the default, keeps segments (:mod:`apiary.os.paging`).
    tlbs: tuple[TlbConfig, ...] = ()
    #: Fairness counters (Coyote's): flits, messages, payload bytes and stall cycles at the
    #: router's local port both ways (``out_*``, ``in_*``), and ``tile_waits``.
    fairness: bool = False
    #: Registers on every signal crossing the slot (the tile's) boundary, for a later partial
    #: reconfiguration flow: a 2-entry Queue each way, 1 cycle added each way.
    slot_registers: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tlbs", check_tlbs(self.tlbs))
        for name in ("fairness", "slot_registers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"MonitorConfig {name} must be True or False, not "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.kernel_queue, int) or not 1 <= self.kernel_queue <= 256:
            raise ValueError(f"MonitorConfig kernel_queue must be 1 to 256, not "
                             f"{self.kernel_queue!r}")
        if self.entries not in (2, 4, 8, 16, 32, 64):
            raise ValueError(f"MonitorConfig entries must be a power of two from 2 to 64, "
                             f"not {self.entries!r}")
        for name in ("ipc_entries", "in_entries"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 64:
                raise ValueError(f"MonitorConfig {name} must be 1 to 64, not {value!r}")
        if self.rate is not None and not isinstance(self.rate, RateLimit):
            raise ValueError(f"MonitorConfig rate must be a RateLimit or None, not "
                             f"{self.rate!r}")


#: A segment capability, one row of the table.
SEGMENT = data.StructLayout({
    "valid": 1, "owner": 1, "gen": HANDLE_BITS, "base": 48, "size": 40, "perm": 2,
    "mem_x": 8, "mem_y": 8, "root": 16,
})

#: An IPC capability (either direction): ``any`` ignores ``fbits``.
IPC_ENTRY = data.StructLayout({"valid": 1, "any": 1, "x": 8, "y": 8, "fbits": 4})

_REQUEST = data.StructLayout({
    "msg_type": 8, "dst_x": 8, "dst_y": 8, "dst_fbits": 4, "meta": KERNEL_META,
})

#: The monitor's fairness counters (``MonitorConfig(fairness=True)``).
FAIRNESS_COUNTERS = {
    **FlitMeter.counter_names("out_"), **FlitMeter.counter_names("in_"),
    "tile_waits": "cycles the tile offered a flit the monitor did not take (checks, rate, NoC)",
}

_MONITOR_TYPES = (K.CAP_INSTALL, K.CAP_REVOKE, K.IPC_GRANT, K.RELEASE)
_TILE_OPS = (K.CAP_ALLOC, K.CAP_FREE, K.CAP_SEND)

Place = tuple[int, int]
Cap = tuple[int, int, int | None]


def _ipc_init(caps: Sequence[Cap], size: int, what: str) -> list[dict]:
    caps = list(dict.fromkeys(caps))
    if len(caps) > size:
        raise ValueError(f"the monitor has {size} {what} entries but the design grants "
                         f"{len(caps)}; raise MonitorConfig")
    rows = [{"valid": 1, "any": int(f is None), "x": x, "y": y, "fbits": f or 0}
            for x, y, f in caps]
    return rows + [{}] * (size - len(rows))


class Monitor(Component):
    """The monitor of one untrusted tile (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        The guarded tile's env (its position and width).
    config : MonitorConfig
    ipc_out, ipc_in : sequence of (x, y, fbits or None)
        IPC capabilities at reset.
    kernel : sequence of (x, y)
        Positions of the kernel's tiles: their messages always reach the monitor and the tile.
    manager, errors : (x, y)
        The memory manager and the error manager.

    Members
    -------
    tile_in : Out(flit)
        To the tile's ``noc_in``.
    tile_out : In(flit)
        From the tile's ``noc_out``.
    noc_in : In(flit)
        From the router.
    noc_out : Out(flit)
        To the router.
    tile_reset : Out(1)
        Holds the tile in reset (during ``RELEASE``).
    counters : Out(CounterSignature)
    """

    COUNTERS = {
        "passed_out": "messages from the tile passed to the NoC",
        "passed_in": "messages passed to the tile",
        "sunk_out": "messages from the tile sunk (violations, and everything while quarantined)",
        "sunk_in": "messages to the tile sunk (inbound denials, and while quarantined)",
        "faults": "violations reported to the error manager",
        "inbound_denied": "messages from a source the tile may not receive from",
        "cap_ops": "capability operations (CAP_ALLOC, CAP_FREE, CAP_SEND) handled",
        "installs_dropped": "CAP_INSTALLs with no free table entry",
        "kernel_denied": "kernel messages to the monitor from a non-kernel tile, dropped",
        "rate_stalls": "cycles a message waited for rate tokens",
        "quarantined": (1, "the tile is quarantined"),
    }

    def __init__(self, env: TileEnv, config: MonitorConfig = MonitorConfig(), *,
                 ipc_out: Iterable[Cap] = (), ipc_in: Iterable[Cap] = (),
                 kernel: Iterable[Place] = (), manager: Place = (0, 0),
                 errors: Place = (0, 0)) -> None:
        if not isinstance(config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig, not {config!r}")
        self.env = env
        self.config = config
        self._ipc_out = _ipc_init(list(ipc_out), config.ipc_entries, "IPC-out")
        self._ipc_in = _ipc_init(list(ipc_in), config.in_entries, "IPC-in")
        self._kernel = list(dict.fromkeys(tuple(k) for k in kernel))
        self._manager = tuple(manager)
        self._errors = tuple(errors)
        w = env.width
        super().__init__({
            "tile_in": Out(flit_signature(w)),
            "tile_out": In(flit_signature(w)),
            "noc_in": In(flit_signature(w)),
            "noc_out": Out(flit_signature(w)),
            "tile_reset": Out(1),
            "counters": Out(CounterSignature({
                **self.COUNTERS, **(PAGED_COUNTERS if config.tlbs else {}),
                **(FAIRNESS_COUNTERS if config.fairness else {})})),
        })

    # -- the head of a message, as fields ------------------------------------------------------

    def _views(self, head: Any) -> tuple[Any, Any, Any, Any]:
        """``(value, header, mem_meta, kernel_meta)`` views of a gate's head."""
        w = self.env.width
        nh = header_flits(w)
        n = len(head) // w
        flits = [head[j * w:(j + 1) * w] for j in range(n)]
        value = Cat(*reversed(flits[:nh]), *flits[nh:])
        hdr = noc_header(w)
        header = data.View(hdr.layout(), value[:hdr.size])
        return value, header, self._meta(value, MEM_META), self._meta(value, KERNEL_META)

    def _meta(self, value: Any, layout: data.StructLayout) -> Any:
        w = self.env.width
        _, inline, bits = meta_plan(w, meta_bits=layout.size)
        start = 0 if inline else noc_header(w).size
        return data.View(layout, value[start:start + bits])

    def _flits_of(self, value: Any, n: int) -> Any:
        """The inverse of ``_views``: the head flits of a header + metadata value."""
        w = self.env.width
        nh = header_flits(w)
        flits = [value[(nh - 1 - j) * w:(nh - j) * w] for j in range(nh)]
        flits += [value[nh * w + j * w: nh * w + (j + 1) * w] for j in range(n - nh)]
        return Cat(*flits)

    def _head_flits(self, layout: data.StructLayout) -> int:
        w = self.env.width
        return header_flits(w) + meta_plan(w, meta_bits=layout.size)[0]

    # -- elaboration ---------------------------------------------------------------------------

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cfg, w = self.config, self.env.width
        nh = header_flits(w)
        mem_need, kern_need = self._head_flits(MEM_META), self._head_flits(KERNEL_META)
        max_head = max(mem_need, kern_need)
        slot_bits = (cfg.entries - 1).bit_length()
        type_lsb = field_location(w, "msg_type")[1]
        c = self.counters

        def is_type(value: Any, types: Iterable[Any]) -> Any:
            return Cat(*(value == int(getattr(t, "value", t)) for t in types)).any()

        if cfg.fairness:                # at the router's local port, both ways (noc/meter.py)
            meter(m, "out_meter", w, self.noc_out, c, "out_")
            meter(m, "in_meter", w, self.noc_in, c, "in_")
            with m.If(self.tile_out.valid & ~self.tile_out.ready):
                count(m, c.tile_waits)

        # -- tables --------------------------------------------------------------------------------
        seg = [Signal(SEGMENT, name=f"seg{i}") for i in range(cfg.entries)]
        ipc_out = [Signal(IPC_ENTRY, name=f"ipc_out{i}", init=row)
                   for i, row in enumerate(self._ipc_out)]
        ipc_in = [Signal(IPC_ENTRY, name=f"ipc_in{i}", init=row)
                  for i, row in enumerate(self._ipc_in)]
        seg_raw = Array(s.as_value() for s in seg)
        quarantined = Signal()
        releasing = Signal()
        m.d.comb += [c.quarantined.eq(quarantined), self.tile_reset.eq(releasing)]

        free_slot = Signal(range(cfg.entries))
        has_free = Signal()
        for i in reversed(range(cfg.entries)):
            with m.If(~seg[i].valid):
                m.d.comb += [free_slot.eq(i), has_free.eq(1)]

        def ipc_match(table: list, x: Any, y: Any, fbits: Any) -> Any:
            return Cat(*(e.valid & (e.x == x) & (e.y == y) & (e.any | (e.fbits == fbits))
                         for e in table)).any()

        def from_kernel(x: Any, y: Any) -> Any:
            if not self._kernel:
                return Const(0)
            return Cat(*((x == kx) & (y == ky) for kx, ky in self._kernel)).any()

        def handle_of(slot: Any) -> Any:
            entry = data.View(SEGMENT, seg_raw[slot])
            return (slot | (entry.gen << slot_bits))[:HANDLE_BITS]

        def entry_of(handle: Any) -> tuple[Any, Any]:
            """``(entry, current)``: the row a handle names, and whether the handle is valid."""
            entry = data.View(SEGMENT, seg_raw[handle[:slot_bits]])
            gen = handle[slot_bits:HANDLE_BITS]
            return entry, entry.valid & (entry.gen[:HANDLE_BITS - slot_bits] == gen)

        # -- requests the monitor sends (one register each, a sender each) -------------------------
        def request(name: str) -> Any:
            return Signal(_REQUEST, name=name), Signal(name=f"{name}_valid")

        o2n, o2n_valid = request("o2n")        # out side → NoC
        i2n, i2n_valid = request("i2n")        # in side → NoC
        o2t, o2t_valid = request("o2t")        # out side → tile
        i2t, i2t_valid = request("i2t")        # in side → tile
        senders = {}
        for name, req, valid in (("o2n", o2n, o2n_valid), ("i2n", i2n, i2n_valid),
                                 ("o2t", o2t, o2t_valid), ("i2t", i2t, i2t_valid)):
            tx = senders[name] = MessageSender(w, meta_bits=KERNEL_META.size)
            m.submodules[f"{name}_tx"] = tx
            d = tx.i_hdr.payload
            m.d.comb += [
                tx.i_hdr.valid.eq(valid),
                d.dst_x.eq(req.dst_x), d.dst_y.eq(req.dst_y), d.dst_fbits.eq(req.dst_fbits),
                d.src_x.eq(self.env.x), d.src_y.eq(self.env.y), d.src_fbits.eq(Fbits.LOCAL0),
                d.msg_type.eq(req.msg_type), d.payload_bytes.eq(0), d.meta.eq(req.meta),
            ]
            with m.If(tx.i_hdr.valid & tx.i_hdr.ready):
                m.d.sync += valid.eq(0)

        # The in side never waits for the NoC while it holds a kernel message: its requests
        # (CAP_REVOKED, MM_FREE, FAULT) go through a queue as deep as the revocations the
        # memory manager can have outstanding to one monitor, into i2n.
        m.submodules.kernel_queue = kq = Queue(_REQUEST, cfg.kernel_queue)
        with m.If(~i2n_valid):
            m.d.comb += kq.o.ready.eq(1)
            with m.If(kq.o.valid):
                m.d.sync += [i2n.eq(kq.o.payload), i2n_valid.eq(1)]

        def push(msg_type: Any, dst: tuple, **meta: Any) -> list:
            p = kq.i.payload
            stmts = [kq.i.valid.eq(1), p.msg_type.eq(msg_type), p.dst_x.eq(dst[0]),
                     p.dst_y.eq(dst[1]), p.dst_fbits.eq(dst[2])]
            return stmts + [getattr(p.meta, k).eq(v) for k, v in meta.items()]

        def send(req: Any, valid: Any, msg_type: Any, dst: tuple, **meta: Any) -> list:
            stmts = [valid.eq(1), req.msg_type.eq(msg_type), req.dst_x.eq(dst[0]),
                     req.dst_y.eq(dst[1]), req.dst_fbits.eq(dst[2]), req.meta.eq(0)]
            stmts += [getattr(req.meta, k).eq(v) for k, v in meta.items()]
            return stmts

        manager = (*self._manager, Fbits.LOCAL0)
        errors = (*self._errors, Fbits.LOCAL0)
        tile_port = (self.env.x, self.env.y, Fbits.LOCAL0)

        # -- the two gates and the mergers ---------------------------------------------------------
        og = MessageGate(w, max_head)
        # The tile is held in reset during RELEASE: take nothing from it (its outputs mean
        # nothing), and start the gate afresh (it may be sinking a message the reset cut).
        m.submodules.out_gate = ResetInserter(releasing)(og)
        m.submodules.in_gate = ig = MessageGate(w, max_head)
        m.submodules.to_noc = to_noc = MessageMerger(w, 3)
        m.submodules.to_tile = to_tile = MessageMerger(w, 3)
        tile_out, tile_in = self.tile_out, self.tile_in
        if cfg.slot_registers:          # nothing combinational crosses the slot's boundary
            tile_out, tile_in = self._slot_registers(m, releasing, quarantined)
        m.d.comb += [
            og.i.valid.eq(tile_out.valid & ~releasing),
            og.i.payload.eq(tile_out.payload),
            tile_out.ready.eq(og.i.ready & ~releasing),
        ]
        connect(m, gate=og.o, merger=to_noc.i[0])
        connect(m, a=senders["o2n"].o, merger=to_noc.i[1])
        connect(m, a=senders["i2n"].o, merger=to_noc.i[2])
        connect(m, merger=to_noc.o, noc=flipped(self.noc_out))
        connect(m, noc=flipped(self.noc_in), gate=ig.i)
        connect(m, gate=ig.o, merger=to_tile.i[0])
        connect(m, a=senders["o2t"].o, merger=to_tile.i[1])
        connect(m, a=senders["i2t"].o, merger=to_tile.i[2])
        # A quarantined tile hears nothing: what is on its way to it (a message it was taking, the
        # monitor's own answers) is drained here, so a tile that stops reading cannot hold up its
        # router port, nor the kernel's messages to the monitor behind it.
        m.d.comb += [
            tile_in.payload.eq(to_tile.o.payload),
            tile_in.valid.eq(to_tile.o.valid & ~quarantined),
            to_tile.o.ready.eq(tile_in.ready | quarantined),
        ]
        for tx in senders.values():
            m.d.comb += tx.i_data.valid.eq(0)

        # Kernel messages the monitor consumes (TLB_FILL only when it translates by pages).
        monitor_types = _MONITOR_TYPES + ((K.TLB_FILL,) if cfg.tlbs else ())

        def need(first: Any, mem_types: Iterable[Any], kern_types: Iterable[Any]) -> Any:
            msg_type = first[type_lsb:type_lsb + 8]
            return Mux(is_type(msg_type, mem_types), mem_need,
                       Mux(is_type(msg_type, kern_types), kern_need, nh))

        m.d.comb += [
            og.need.eq(need(og.first, (LOAD_MEM, STORE_MEM), _TILE_OPS)),
            ig.need.eq(need(ig.first, (LOAD_MEM_ACK, STORE_MEM_ACK), monitor_types)),
        ]

        # -- rate limit ----------------------------------------------------------------------------
        rate = cfg.rate
        tokens_ok = Signal(init=1)
        spend = Signal(23)
        if rate is not None:
            tokens = Signal(range(rate.burst + 1), init=rate.burst)
            tick = Signal(range(rate.period))
            refill = Signal()
            m.d.comb += refill.eq(tick == rate.period - 1)
            m.d.sync += tick.eq(Mux(refill, 0, tick + 1))
            after = Signal(range(rate.burst + rate.refill + 1))
            m.d.comb += after.eq(tokens - spend + Mux(refill, rate.refill, 0))
            m.d.sync += tokens.eq(Mux(after > rate.burst, rate.burst, after))

        # -- outgoing ------------------------------------------------------------------------------
        value, hdr, mm, km = self._views(og.head)
        new = Signal(len(value))
        new_hdr = data.View(noc_header(w).layout(), new[:noc_header(w).size])
        new_mm = self._meta(new, MEM_META)
        m.d.comb += [new.eq(value), og.rewritten.eq(self._flits_of(new, max_head))]
        # The source is the tile's own place, whatever it wrote: replies and memory acks come
        # back to it, never to a tile it names.
        m.d.comb += [new_hdr.src_x.eq(self.env.x), new_hdr.src_y.eq(self.env.y)]
        msg_type = hdr.msg_type
        is_mem = is_type(msg_type, (LOAD_MEM, STORE_MEM))
        cost = Signal(23)           # flits; a message larger than the bucket takes a full one
        m.d.comb += cost.eq(hdr.msg_len + 1)
        if rate is not None:
            with m.If(hdr.msg_len + 1 > rate.burst):
                m.d.comb += cost.eq(rate.burst)
            m.d.comb += tokens_ok.eq(tokens >= cost)

        # memory checks
        handle = mm.addr[OFFSET_BITS:OFFSET_BITS + HANDLE_BITS]
        entry, current = entry_of(handle)
        offset = mm.addr[:OFFSET_BITS]
        want = Mux(msg_type == LOAD_MEM, Perm.READ, Perm.WRITE)
        ring = Signal(48)
        m.d.comb += ring.eq(Const(1, 1) << mm.wrap)
        lo = Mux(mm.wrap != 0, offset & ~(ring - 1), offset)
        span = Mux(mm.wrap != 0, ring, mm.size)
        in_bounds = Signal()
        m.d.comb += in_bounds.eq(
            (lo + span <= entry.size)
            & ((mm.wrap == 0) | ((mm.wrap <= OFFSET_BITS) & ((entry.base & (ring - 1)) == 0))))
        mem_fault = Signal(4)
        with m.If(~current):
            m.d.comb += mem_fault.eq(FaultKind.STALE_HANDLE)
        with m.Elif((entry.perm & want) != want):
            m.d.comb += mem_fault.eq(FaultKind.PERMISSION)
        with m.Elif(~in_bounds):
            m.d.comb += mem_fault.eq(FaultKind.OUT_OF_BOUNDS)

        # capability operations
        op_handle = km.handle
        op_entry, op_current = entry_of(op_handle)
        narrower = ((km.addr + km.size <= op_entry.size) & ((km.perm & ~op_entry.perm) == 0)
                    & (km.addr < (1 << OFFSET_BITS)))
        send_fault = Signal(4)
        with m.If(~op_current):
            m.d.comb += send_fault.eq(FaultKind.STALE_HANDLE)
        with m.Elif(~narrower):
            m.d.comb += send_fault.eq(FaultKind.DERIVE_WIDER)
        with m.Elif(~ipc_match(ipc_out, km.peer_x, km.peer_y, km.peer_fbits)):
            m.d.comb += send_fault.eq(FaultKind.NO_IPC_CAP)

        checked = Signal(4)             # the violation the checks find, before the rate limit
        with m.If(og.short):
            m.d.comb += checked.eq(FaultKind.MALFORMED)
        with m.Elif(is_type(msg_type, KERNEL_ONLY)):
            m.d.comb += checked.eq(FaultKind.FORGED)
        with m.Elif(msg_type == K.CAP_SEND.value):
            m.d.comb += checked.eq(send_fault)
        with m.Elif(is_mem):
            m.d.comb += checked.eq(mem_fault)
        with m.Elif(~is_type(msg_type, _TILE_OPS)
                    & ~ipc_match(ipc_out, hdr.dst_x, hdr.dst_y, hdr.dst_fbits)):
            m.d.comb += checked.eq(FaultKind.NO_IPC_CAP)
        fault = Signal(4)
        m.d.comb += fault.eq(checked)
        if rate is not None and rate.on_excess == "fault":
            with m.If((checked == 0) & ~is_type(msg_type, _TILE_OPS) & ~tokens_ok):
                m.d.comb += fault.eq(FaultKind.RATE)

        with m.If(is_mem):
            m.d.comb += [
                new_hdr.dst_x.eq(entry.mem_x), new_hdr.dst_y.eq(entry.mem_y),
                new_hdr.dst_fbits.eq(Fbits.LOCAL0),
                new_mm.addr.eq(entry.base + offset), new_mm.tag.eq(handle),
            ]

        # What a FAULT reports beyond kind, destination and type: the details of a (whole) load,
        # store or CAP_SEND; zero for anything else (its head may hold no such fields).
        f_mem = is_mem & ~og.short
        f_send = (msg_type == K.CAP_SEND.value) & ~og.short

        out_accept = og.decide & og.accept
        translating = Signal()          # a load or store waits for its page's translation
        fill_wait = Signal()            # a TLB_FILL waits for its TLB
        paging = None
        if cfg.tlbs:                    # paged translation instead of segments (paging.py)
            m.submodules.paging = paging = PagedTranslation(cfg.tlbs)
            m.d.comb += [
                paging.query.eq(og.decide & is_mem & ~og.short & ~quarantined),
                paging.vaddr.eq(mm.addr),
                paging.size.eq(mm.size), paging.wrap.eq(mm.wrap), paging.want.eq(want),
                paging.taken.eq(out_accept), mem_fault.eq(paging.fault),
                translating.eq(paging.query & ~paging.ready),
                c.tlb_hits.eq(paging.hits), c.tlb_misses.eq(paging.misses),
                c.page_faults.eq(paging.page_faults),
            ]
            with m.If(is_mem):
                m.d.comb += [new_hdr.dst_x.eq(paging.mem_x), new_hdr.dst_y.eq(paging.mem_y),
                             new_mm.addr.eq(paging.addr), new_mm.tag.eq(mm.tag)]
            with m.If(~o2n_valid):
                m.d.comb += paging.miss.ready.eq(1)
                with m.If(paging.miss.valid):
                    m.d.sync += send(o2n, o2n_valid, K.TLB_MISS, manager,
                                     addr=paging.miss.payload)
        with m.If(og.decide):
            with m.If(quarantined):
                m.d.comb += og.verdict.eq(Verdict.DROP)
                with m.If(og.accept):
                    count(m, c.sunk_out)
            if paging is not None:
                with m.Elif(translating):
                    m.d.comb += og.verdict.eq(Verdict.WAIT)
            with m.Elif(fault != 0):
                m.d.comb += og.verdict.eq(Mux(o2n_valid, Verdict.WAIT, Verdict.DROP))
                with m.If(out_accept):
                    m.d.sync += [
                        quarantined.eq(1),
                        c.faults.eq(c.faults + 1), c.sunk_out.eq(c.sunk_out + 1),
                        *send(o2n, o2n_valid, K.FAULT, errors, op=fault,
                              handle=Mux(f_mem, handle, Mux(f_send, km.handle, 0)),
                              addr=Mux(f_mem, mm.addr, Mux(f_send, km.addr, 0)),
                              size=Mux(f_mem, mm.size, Mux(f_send, km.size, 0)),
                              perm=Mux(f_mem, want, Mux(f_send, km.perm, 0)),
                              peer_x=Mux(f_send, km.peer_x, hdr.dst_x),
                              peer_y=Mux(f_send, km.peer_y, hdr.dst_y),
                              peer_fbits=Mux(f_send, km.peer_fbits, hdr.dst_fbits),
                              user=msg_type),
                    ]
            with m.Elif(is_type(msg_type, _TILE_OPS)):
                m.d.comb += og.verdict.eq(Mux(o2n_valid | o2t_valid, Verdict.WAIT, Verdict.DROP))
                result = dict(op=msg_type, handle=km.handle, size=km.size, perm=km.perm,
                              user=km.user)
                with m.If(out_accept):
                    count(m, c.cap_ops)
                    with m.Switch(msg_type):
                        with m.Case(K.CAP_ALLOC.value):
                            with m.If(has_free):
                                m.d.sync += send(o2n, o2n_valid, K.MM_ALLOC, manager,
                                                 size=km.size, perm=km.perm, user=km.user)
                            with m.Else():
                                m.d.sync += send(o2t, o2t_valid, K.CAP_RESULT, tile_port,
                                                 status=Status.TABLE_FULL, **result)
                        with m.Case(K.CAP_FREE.value):
                            with m.If(op_current):
                                m.d.sync += send(o2t, o2t_valid, K.CAP_RESULT, tile_port,
                                                 status=Status.OK, **result)
                                with m.If(op_entry.owner):
                                    m.d.sync += send(o2n, o2n_valid, K.MM_FREE, manager,
                                                     root=op_entry.root)
                                with m.Switch(op_handle[:slot_bits]):
                                    for i in range(cfg.entries):
                                        with m.Case(i):
                                            m.d.sync += [seg[i].valid.eq(0),
                                                         seg[i].gen.eq(seg[i].gen + 1)]
                            with m.Else():
                                m.d.sync += send(o2t, o2t_valid, K.CAP_RESULT, tile_port,
                                                 status=Status.BAD_HANDLE, **result)
                        with m.Case(K.CAP_SEND.value):
                            m.d.sync += [
                                *send(o2n, o2n_valid, K.MM_DERIVE, manager,
                                      addr=op_entry.base + km.addr, size=km.size,
                                      perm=km.perm, mem_x=op_entry.mem_x,
                                      mem_y=op_entry.mem_y, root=op_entry.root,
                                      peer_x=km.peer_x, peer_y=km.peer_y,
                                      peer_fbits=km.peer_fbits, user=km.user),
                                *send(o2t, o2t_valid, K.CAP_RESULT, tile_port,
                                      status=Status.OK, **result),
                            ]
            with m.Elif(~tokens_ok):
                m.d.comb += og.verdict.eq(Verdict.WAIT)
                count(m, c.rate_stalls)
            with m.Else():
                m.d.comb += og.verdict.eq(Verdict.PASS)
                with m.If(out_accept):
                    count(m, c.passed_out)
                    m.d.comb += spend.eq(cost)

        # -- incoming ------------------------------------------------------------------------------
        ivalue, ihdr, imm, ikm = self._views(ig.head)
        inew = Signal(len(ivalue))
        inew_mm = self._meta(inew, MEM_META)
        m.d.comb += [inew.eq(ivalue), ig.rewritten.eq(self._flits_of(inew, max_head))]
        itype = ihdr.msg_type
        kernel_src = from_kernel(ihdr.src_x, ihdr.src_y)
        ack_entry = data.View(SEGMENT, seg_raw[imm.tag[:slot_bits]])
        with m.If(is_type(itype, (LOAD_MEM_ACK, STORE_MEM_ACK)) & kernel_src):
            m.d.comb += inew_mm.addr.eq(Cat((imm.addr - ack_entry.base)[:OFFSET_BITS], imm.tag))
        if paging is not None:          # paged: the ack keeps its physical address and tag
            m.d.comb += inew_mm.addr.eq(imm.addr)
            ans = paging.answer.payload
            m.d.comb += [ans.status.eq(ikm.status), ans.base.eq(ikm.addr),
                         ans.size.eq(ikm.size), ans.mem_x.eq(ikm.mem_x),
                         ans.mem_y.eq(ikm.mem_y), ans.perm.eq(ikm.perm),
                         fill_wait.eq((itype == K.TLB_FILL.value) & ~paging.answer.ready)]
        in_accept = ig.decide & ig.accept

        walk = Signal(range(cfg.entries + 1))
        with m.If(ig.decide):
            with m.If(is_type(itype, monitor_types) & ~ig.short):
                with m.If(~kernel_src):
                    m.d.comb += ig.verdict.eq(Verdict.DROP)
                    with m.If(ig.accept):
                        count(m, c.kernel_denied)
                with m.Else():
                    busy = ~kq.i.ready | i2t_valid | releasing
                    if paging is not None:
                        busy = busy | fill_wait
                    m.d.comb += ig.verdict.eq(Mux(busy, Verdict.WAIT, Verdict.DROP))
                    with m.If(in_accept):
                        with m.Switch(itype):
                            with m.Case(K.CAP_INSTALL.value):
                                self._install(m, ikm, seg, free_slot, has_free, handle_of,
                                              push, (i2t, i2t_valid), send, manager,
                                              tile_port, c.installs_dropped)
                            with m.Case(K.CAP_REVOKE.value):
                                for e in seg:
                                    with m.If(e.valid & ~e.owner & (e.root == ikm.root)):
                                        m.d.sync += [e.valid.eq(0), e.gen.eq(e.gen + 1)]
                                m.d.comb += push(K.CAP_REVOKED,
                                                 (ihdr.src_x, ihdr.src_y, ihdr.src_fbits),
                                                 root=ikm.root)
                            with m.Case(K.IPC_GRANT.value):
                                self._grant(m, ikm, ipc_out, ipc_in)
                            with m.Case(K.TLB_FILL.value):
                                if paging is not None:
                                    m.d.comb += paging.answer.valid.eq(1)
                            with m.Case(K.RELEASE.value):     # of a quarantined tile only
                                with m.If(quarantined):
                                    m.d.sync += [releasing.eq(1), walk.eq(0)]
            with m.Elif(quarantined | ig.short):
                m.d.comb += ig.verdict.eq(Verdict.DROP)
                with m.If(ig.accept):
                    count(m, c.sunk_in)
            with m.Elif(kernel_src | ipc_match(ipc_in, ihdr.src_x, ihdr.src_y, ihdr.dst_fbits)):
                m.d.comb += ig.verdict.eq(Verdict.PASS)
                with m.If(in_accept):
                    count(m, c.passed_in)
            with m.Else():
                m.d.comb += ig.verdict.eq(Verdict.DROP)
                with m.If(in_accept):
                    m.d.sync += [c.sunk_in.eq(c.sunk_in + 1),
                                 c.inbound_denied.eq(c.inbound_denied + 1)]
                    with m.If(kq.i.ready & ~releasing):
                        count(m, c.faults)
                        m.d.comb += push(K.FAULT, errors, op=FaultKind.INBOUND,
                                         peer_x=ihdr.src_x, peer_y=ihdr.src_y,
                                         peer_fbits=ihdr.dst_fbits, user=itype | 1 << 8)

        # -- release: give back owned memory, drop every segment, then lift the quarantine ---------
        with m.If(releasing):
            walked = data.View(SEGMENT, seg_raw[walk[:slot_bits]])
            with m.If(walk == cfg.entries):
                m.d.sync += [releasing.eq(0), quarantined.eq(0)]
            with m.Elif(kq.i.ready):
                m.d.sync += walk.eq(walk + 1)
                with m.If(walked.valid & walked.owner):
                    m.d.comb += push(K.MM_FREE, manager, root=walked.root)
                with m.Switch(walk):
                    for i, e in enumerate(seg):
                        with m.Case(i):
                            with m.If(e.valid):
                                m.d.sync += [e.valid.eq(0), e.gen.eq(e.gen + 1)]
        return m

    def _slot_registers(self, m: Module, releasing: Any, quarantined: Any) -> tuple[Any, Any]:
        """A :class:`Queue` of 2 between each tile port and the monitor (its outputs depend on
        its state alone), emptied by ``RELEASE``; return the monitor's new ends of the two
        ports. The tile's ``ready`` and ``valid`` only ever reach a queue's state."""
        w = self.env.width
        q_out = m.submodules.slot_out = ResetInserter(releasing)(Queue(flit_layout(w), 2))
        q_in = m.submodules.slot_in = ResetInserter(releasing)(Queue(flit_layout(w), 2))
        m.d.comb += [
            q_out.i.valid.eq(self.tile_out.valid & ~releasing),
            q_out.i.payload.eq(self.tile_out.payload),
            self.tile_out.ready.eq(q_out.i.ready & ~releasing),
            self.tile_in.valid.eq(q_in.o.valid & ~quarantined),
            self.tile_in.payload.eq(q_in.o.payload),
            q_in.o.ready.eq(self.tile_in.ready | quarantined),
        ]
        return q_out.o, q_in.i

    @staticmethod
    def _install(m: Module, km: Any, seg: list, free_slot: Any, has_free: Any, handle_of: Any,
                 push: Any, to_tile: tuple, send: Any, manager: tuple,
                 tile_port: tuple, dropped: Any) -> None:
        """``CAP_INSTALL``: into the first free row; answer the tile (``CAP_RESULT`` for an
        allocation, ``CAP_NOTIFY`` for a capability sent to it). With no free row, count it in
        ``dropped``."""
        is_alloc = km.op == K.CAP_ALLOC.value
        ok = km.status == Status.OK
        with m.If(ok & ~has_free):
            m.d.sync += dropped.eq(dropped + 1)
        with m.If(ok & has_free):
            with m.Switch(free_slot):
                for i, e in enumerate(seg):
                    with m.Case(i):
                        m.d.sync += [
                            e.valid.eq(1), e.owner.eq(is_alloc), e.base.eq(km.addr),
                            e.size.eq(km.size), e.perm.eq(km.perm), e.mem_x.eq(km.mem_x),
                            e.mem_y.eq(km.mem_y), e.root.eq(km.root),
                        ]
            with m.If(is_alloc):
                m.d.sync += send(*to_tile, K.CAP_RESULT, tile_port, op=K.CAP_ALLOC,
                                 status=Status.OK, handle=handle_of(free_slot), size=km.size,
                                 perm=km.perm, user=km.user)
            with m.Else():
                m.d.sync += send(*to_tile, K.CAP_NOTIFY, tile_port, handle=handle_of(free_slot),
                                 size=km.size, perm=km.perm, peer_x=km.peer_x,
                                 peer_y=km.peer_y, user=km.user)
        with m.Elif(is_alloc):
            status = Mux(ok, Status.TABLE_FULL, km.status)
            m.d.sync += send(*to_tile, K.CAP_RESULT, tile_port, op=K.CAP_ALLOC, status=status,
                             user=km.user)
            with m.If(ok):                      # allocated, but nowhere to keep it: give it back
                m.d.comb += push(K.MM_FREE, manager, root=km.root)

    @staticmethod
    def _grant(m: Module, km: Any, ipc_out: list, ipc_in: list) -> None:
        """``IPC_GRANT``: add (``status`` 1) or remove an IPC capability; an add to a full table
        is ignored."""
        for table, direction in ((ipc_out, IpcDir.OUT), (ipc_in, IpcDir.IN)):
            with m.If(km.perm == direction):
                same = [e.valid & (e.x == km.peer_x) & (e.y == km.peer_y)
                        & (e.fbits == km.peer_fbits) & ~e.any for e in table]
                with m.If(km.status == 1):
                    with m.If(~Cat(*same).any()):
                        chosen = Signal(range(len(table)), name=f"grant_{direction.name}")
                        found = Signal(name=f"grant_{direction.name}_found")
                        for i in reversed(range(len(table))):
                            with m.If(~table[i].valid):
                                m.d.comb += [chosen.eq(i), found.eq(1)]
                        with m.If(found):
                            with m.Switch(chosen):
                                for i, e in enumerate(table):
                                    with m.Case(i):
                                        m.d.sync += [e.valid.eq(1), e.any.eq(0),
                                                     e.x.eq(km.peer_x), e.y.eq(km.peer_y),
                                                     e.fbits.eq(km.peer_fbits)]
                with m.Else():
                    for e in table:
                        with m.If(e.valid & (e.x == km.peer_x) & (e.y == km.peer_y)
                                  & (e.any | (e.fbits == km.peer_fbits))):
                            m.d.sync += e.valid.eq(0)
