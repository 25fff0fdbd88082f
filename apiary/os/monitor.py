"""The Apiary monitor: the trusted guard between an untrusted tile and its router.

Every message the tile sends and every message sent to it passes through the monitor, which
holds the tile's capabilities (formats in :mod:`apiary.os.uapi`):

* **IPC capabilities out**: ``(x, y, port)`` the tile may send to (a port of ``None``: any).
  Set from the design's grants (``Design.allow``) and changed at run time by ``IPC_GRANT``
  (which the table compares with its lookup's comparators: a message from the tile judged in
  the cycle of a grant to this table waits that cycle).
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

With a :class:`RateLimit`, every passed message and every capability operation (``CAP_ALLOC``,
``CAP_FREE``, ``CAP_SEND`` ...: each costs the kernel work) costs ``msg_len + 1`` tokens (its
flits) from a token bucket; without enough it waits (``on_excess="stall"``) or is a violation
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
owned segment) and drops its segment capabilities, then lifts the quarantine. A ``RELEASE`` of a
tile that has not faulted (hung, say) is a *kill*: it quarantines the tile and releases it the
same way; a message the reset cuts part way is ended on the NoC (below). The rest of the NoC never
notices.

**A tile that stops reading** (``MonitorConfig.stall_limit``, 65,536 cycles by default) is
quarantined the same way, with a ``FAULT`` of kind ``STALLED``: a message it was offered and
left untaken for that many cycles in a row, in cycles when it was not itself waiting to send
(:class:`~apiary.os.monitor_stall.StallWatch`). The quarantine drains what waited for it, so a
memory tile's answer to a hung tile holds up no one. A message the tile began and sent no more of
for that many cycles is ended on the NoC with one more flit marked ``last``
(:class:`~apiary.os.monitor_stall.MessageCut`: no router path stays held; the rest of it, should
it come, is discarded) and reported as ``UNFINISHED``, with the quarantine; so is a message a
``RELEASE``'s reset cuts. With ``MonitorConfig.rx_buffer_flits`` the monitor never waits on the
tile at all: messages to it pass a receive buffer that takes every flit the router offers, and
one that finds it full is dropped whole and counted (``rx_dropped``), so a memory tile's answer
to a tile that stopped reading does not wait even the stall limit.

**Revocation.** ``CAP_FREE`` of a handle drops the entry (its generation moves on, so the handle
is stale from then on) and, when the tile owns the segment, asks the manager to free it; the
manager revokes every copy derived from it first (``CAP_REVOKE`` to each holder, acked by
``CAP_REVOKED``), so no copy outlives the memory.

Cost: a message whose head is one flit (everything at 512 bits: header and metadata share the
flit) passes combinationally, **0 cycles** added. Below 512 bits a message waits while its head is
checked: header flits plus, for memory and capability messages, their metadata flits (at 64 bits
2, 4 and 5 flits): latency grows by one cycle per head flit and the link is idle that long, once
per message. With a one-flit head, a passed head that waits for the router (or the tile) stays
on its input: the gate stores only the bits judged (the header and memory metadata; towards
the tile, only an ack's rewritten address) and the rest of the flit passes on wires. Area (Yosys
``synth_xilinx``, default :class:`MonitorConfig`): ``apiary bench kernel --area`` and
docs/performance.md's "Apiary kernel" table.

**Structure.** :class:`Monitor` joins components, each with its contract: two
:class:`~apiary.noc.gate.MessageGate` s and their judges,
:class:`~apiary.os.monitor_out.OutgoingCheck` (with
:class:`~apiary.os.monitor_out.OutgoingRules`, :class:`~apiary.os.monitor_out.TileOps`, the
rate limit's :class:`~apiary.stream.token_bucket.TokenBucket` and the paged translation) and
:class:`~apiary.os.monitor_in.IncomingCheck`; the
:class:`~apiary.os.monitor_tables.CapabilityTables` they share; the quarantine, its
:class:`~apiary.os.monitor_release.Release` and the
:class:`~apiary.os.monitor_stall.StallWatch`; and a
:class:`~apiary.os.monitor_messages.RequestSender` for each of the four ways the monitor's own
messages go (out side to the NoC and to the tile, in side to the tile and, behind the kernel
queue, to the NoC), merged two by two and then with the gates' traffic by
:class:`~apiary.noc.merger.MessageMerger` s of two inputs. At 512 bits the monitor's own
messages are one flit whose head payload lanes are empty (``payload_bytes`` 0): those lanes show
the gate's flit, so that the merger needs no multiplexer there
(:func:`~apiary.os.monitor_messages.spare_lanes`).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from amaranth import Cat, Const, Module, ResetInserter
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out, Component, connect, flipped

from ..noc.flit import flit_layout, flit_signature
from ..noc.gate import MessageGate
from ..noc.merger import MessageMerger
from ..noc.message_buffer import MessageBuffer
from ..noc.meter import FlitMeter, meter
from ..stream.counters import CounterSignature, count
from ..stream.queue import Queue
from ..tile import TileEnv
from .monitor_in import IncomingCheck
from .monitor_messages import (REQUEST, HeadFormat, RequestSender, judge, merge_requests,
                               spare_lanes)
from .monitor_out import OutgoingCheck
from .monitor_release import Release
from .monitor_stall import MessageCut, StallWatch, check_stall_limit
from .monitor_tables import IPC_ENTRY, SEGMENT, Cap, CapabilityTables, ipc_rows
from .paging import PAGED_COUNTERS, SHOOTDOWN_COUNTERS, Shootdown, check_tlbs
from ..stream.integers import power_of_two
from .tlb import TlbConfig
from .uapi import FaultKind


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
    #: Cycles a tile may leave a message it is offered untaken (while not itself waiting to
    #: send) before it is quarantined as ``STALLED`` (:class:`~.monitor_stall.StallWatch`);
    #: ``None``: never.
    stall_limit: int | None = 1 << 16
    #: A receive buffer of this many flits (a power of two, 4 to 4096) between the monitor and
    #: the tile that never waits on the tile: a message that finds too little room is dropped
    #: whole and counted (``rx_dropped``), so a shared tile's answer to a tile that does not
    #: read (a memory tile's, the TCP engine's) never waits at this monitor, even before the
    #: stall watch quarantines it. Store and forward: a message's first flit reaches the tile
    #: 3 cycles after its last reached the buffer. ``None`` (the default): messages wait for
    #: the tile, the NoC behind them.
    rx_buffer_flits: int | None = None

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
        check_stall_limit(self.stall_limit, "MonitorConfig stall_limit", none_ok=True)
        flits = self.rx_buffer_flits
        if flits is not None and not (power_of_two(flits) and 4 <= flits <= 4096):
            raise ValueError(f"MonitorConfig rx_buffer_flits must be None or a power of two "
                             f"from 4 to 4096, not {flits!r}")
        if self.rate is not None and not isinstance(self.rate, RateLimit):
            raise ValueError(f"MonitorConfig rate must be a RateLimit or None, not "
                             f"{self.rate!r}")


#: The monitor's fairness counters (``MonitorConfig(fairness=True)``).
FAIRNESS_COUNTERS = {
    **FlitMeter.counter_names("out_"), **FlitMeter.counter_names("in_"),
    "tile_waits": "cycles the tile offered a flit the monitor did not take (checks, rate, NoC)",
}

#: The receive buffer's counters (``MonitorConfig(rx_buffer_flits=...)``).
RX_BUFFER_COUNTERS = {
    "rx_dropped": "messages to the tile dropped: its receive buffer was full",
}

_OWN_COUNTERS = {
    "faults": "violations reported to the error manager",
    "quarantined": (1, "the tile is quarantined"),
}
_ALL_COUNTERS = {**OutgoingCheck.COUNTERS, **IncomingCheck.COUNTERS, **_OWN_COUNTERS}

Place = tuple[int, int]


def _counters_from(m: Module, counters: Any, side: Any) -> None:
    """Show the counters ``side`` keeps as the monitor's."""
    for name in side.signature.members["counters"].signature.members:
        m.d.comb += getattr(counters, name).eq(getattr(side.counters, name))


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

    COUNTERS = {name: _ALL_COUNTERS[name] for name in (
        "passed_out", "passed_in", "sunk_out", "sunk_in", "faults", "inbound_denied", "cap_ops",
        "installs_dropped", "kernel_denied", "rate_stalls", "quarantined")}

    def __init__(self, env: TileEnv, config: MonitorConfig = MonitorConfig(), *,
                 ipc_out: Iterable[Cap] = (), ipc_in: Iterable[Cap] = (),
                 kernel: Iterable[Place] = (), manager: Place = (0, 0),
                 errors: Place = (0, 0)) -> None:
        if not isinstance(config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig, not {config!r}")
        self.env = env
        self.config = config
        self._ipc_out = ipc_rows(list(ipc_out), config.ipc_entries, "IPC-out")
        self._ipc_in = ipc_rows(list(ipc_in), config.in_entries, "IPC-in")
        self._kernel = [(x, y) for x, y in kernel]
        self._manager = (manager[0], manager[1])
        self._errors = (errors[0], errors[1])
        w = env.width
        super().__init__({
            "tile_in": Out(flit_signature(w)),
            "tile_out": In(flit_signature(w)),
            "noc_in": In(flit_signature(w)),
            "noc_out": Out(flit_signature(w)),
            "tile_reset": Out(1),
            "counters": Out(CounterSignature({
                **self.COUNTERS,
                **({**PAGED_COUNTERS, **SHOOTDOWN_COUNTERS} if config.tlbs else {}),
                **(FAIRNESS_COUNTERS if config.fairness else {}),
                **(RX_BUFFER_COUNTERS if config.rx_buffer_flits else {})})),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cfg, env, w, c = self.config, self.env, self.env.width, self.counters
        if cfg.fairness:                # at the router's local port, both ways (noc/meter.py)
            meter(m, "out_meter", w, self.noc_out, c, "out_")
            meter(m, "in_meter", w, self.noc_in, c, "in_")
            with m.If(self.tile_out.valid & ~self.tile_out.ready):
                count(m, c.tile_waits)

        m.submodules.tables = tables = CapabilityTables(cfg.entries, self._ipc_out, self._ipc_in)
        m.submodules.release = release = Release(cfg.entries, self._manager)
        m.submodules.outgoing = out = OutgoingCheck(
            env, cfg.entries, rate=cfg.rate, tlbs=cfg.tlbs, manager=self._manager,
            errors=self._errors)
        m.submodules.incoming = inc = IncomingCheck(
            env, cfg.entries, kernel=self._kernel, manager=self._manager, errors=self._errors,
            paged=bool(cfg.tlbs))
        quarantined, releasing = release.quarantined, release.releasing
        m.d.comb += [
            c.quarantined.eq(quarantined), self.tile_reset.eq(releasing),
            out.quarantined.eq(quarantined), inc.quarantined.eq(quarantined),
            inc.releasing.eq(releasing), release.start.eq(inc.start_release),
        ]
        watches = self._watches(m, quarantined)
        stalled = Cat(*(w.fault for w in watches)).any()
        with m.If(out.faulted | inc.reported | stalled):    # at once: counted once
            count(m, c.faults)
        _counters_from(m, c, out)
        _counters_from(m, c, inc)
        for side, names in ((out, ("seg", "dst", "drop")),
                            (inc, ("ack", "src", "install", "revoke", "grant")),
                            (release, ("walk", "clear"))):
            for name in names:
                connect(m, side=getattr(side, name), tables=getattr(tables, name))
        connect(m, tables=tables.free, outgoing=out.free, incoming=inc.free)
        shootdown = None
        if cfg.tlbs:                    # the in side hands TLB_FILLs to the out side's TLBs
            connect(m, incoming=inc.answer, outgoing=out.answer)
            m.submodules.shootdown = shootdown = Shootdown(self._manager)
            m.d.comb += [shootdown.start.eq(inc.shootdown), shootdown.sent.eq(out.mem_sent),
                         shootdown.acked.eq(inc.mem_acked), inc.shooting.eq(shootdown.busy),
                         out.flush.eq(shootdown.flush),
                         shootdown.tlb_flushing.eq(out.flushing),
                         c.shootdowns.eq(shootdown.shootdowns)]

        # The monitor's own messages, one RequestSender each way. The in side never waits for
        # the NoC while it holds a kernel message: its requests (CAP_REVOKED, MM_FREE, FAULT),
        # and the release's, go through a queue as deep as the revocations the memory manager
        # can have outstanding to one monitor.
        senders = {name: RequestSender(w, env.x, env.y) for name in ("o2n", "i2n", "o2t", "i2t")}
        for name, sender in senders.items():
            m.submodules[f"{name}_tx"] = sender
        m.submodules.kernel_queue = kq = Queue(REQUEST, cfg.kernel_queue)
        m.d.comb += release.fault.eq(out.faulted | stalled)
        # A watch's FAULT (or the shootdown's ack) waits while the in side, the release or an
        # earlier one offers one.
        busy = inc.to_kernel.valid | release.to_kernel.valid
        faults = []
        for source in [w.to_kernel for w in watches] + (
                [shootdown.to_kernel] if shootdown is not None else []):
            offer = stream.Signature(REQUEST).create()
            m.d.comb += [
                offer.valid.eq(source.valid & ~busy),
                offer.payload.eq(source.payload),
                source.ready.eq(offer.ready & ~busy),
            ]
            faults.append(offer)
            busy = busy | source.valid
        merge_requests(m, kq.i, *faults, inc.to_kernel, release.to_kernel)
        connect(m, outgoing=out.to_noc, sender=senders["o2n"].i)
        connect(m, outgoing=out.to_tile, sender=senders["o2t"].i)
        connect(m, incoming=inc.to_tile, sender=senders["i2t"].i)
        connect(m, queue=kq.o, sender=senders["i2n"].i)
        self._gates(m, out, inc, senders, releasing, quarantined)
        return m

    def _watches(self, m: Module, quarantined: Any) -> list:
        """With a ``stall_limit``, the two :class:`StallWatch` es: ``stall_watch`` on the tile's
        input (``STALLED``), here, and ``send_watch`` on a message the tile has begun to send
        (``UNFINISHED``), joined to its :class:`MessageCut` by :meth:`_gates`."""
        limit = self.config.stall_limit
        if limit is None:
            return []
        m.submodules.stall_watch = watch = StallWatch(limit, self._errors)
        m.d.comb += [
            watch.offered.eq(self.tile_in.valid & ~self.tile_in.ready),
            watch.blocked.eq(self.tile_out.valid & ~self.tile_out.ready),
            watch.quarantined.eq(quarantined),
        ]
        m.submodules.send_watch = sends = StallWatch(limit, self._errors, FaultKind.UNFINISHED)
        return [watch, sends]

    def _gates(self, m: Module, out: OutgoingCheck, inc: IncomingCheck, senders: dict,
               releasing: Any, quarantined: Any) -> None:
        """The two gates, their judges, and the mergers of their messages with the monitor's
        own (``senders``) towards the NoC and the tile."""
        w = self.env.width
        fmt = HeadFormat(w)
        # The tile may break the stream rules: its gate keeps everything judged while a passed
        # head waits. The router keeps them: the in gate keeps only what its judge rewrites.
        og = MessageGate(w, fmt.max_head, fmt.held())
        # The tile is held in reset during RELEASE: take nothing from it (its outputs mean
        # nothing), and start the gate afresh (it may be sinking a message the reset cut).
        m.submodules.out_gate = ResetInserter(releasing)(og)
        m.submodules.in_gate = ig = MessageGate(w, fmt.max_head, fmt.held(False, ("addr",)))
        judge(m, og, out)
        judge(m, ig, inc)
        m.submodules.to_noc = to_noc = MessageMerger(w, 2)
        m.submodules.to_tile = to_tile = MessageMerger(w, 2)
        tile_out, tile_in = self.tile_out, self.tile_in
        if self.config.slot_registers:  # nothing combinational crosses the slot's boundary
            tile_out, tile_in = self._slot_registers(m, releasing, quarantined)
        m.d.comb += [
            og.i.valid.eq(tile_out.valid & ~releasing),
            og.i.payload.eq(tile_out.payload),
            tile_out.ready.eq(og.i.ready & ~releasing),
        ]
        # A message that a RELEASE's reset cuts, or that the tile leaves part way, is ended on
        # the NoC, so that no router path stays held.
        m.submodules.cut = cut = MessageCut(w)
        connect(m, gate=og.o, cut=cut.i)
        connect(m, cut=cut.o, merger=to_noc.i[0])
        unfinished = Const(0)
        if self.config.stall_limit is not None:
            sends = m.submodules.send_watch
            m.d.comb += [sends.offered.eq(cut.mid & ~cut.i.valid), sends.blocked.eq(0),
                         sends.quarantined.eq(0)]
            unfinished = sends.fault
        m.d.comb += [cut.cut.eq(releasing | unfinished), cut.flush.eq(releasing)]
        self._own_messages(m, "noc", senders["o2n"], senders["i2n"], cut.o, to_noc.i[1])
        connect(m, merger=to_noc.o, noc=flipped(self.noc_out))
        connect(m, noc=flipped(self.noc_in), gate=ig.i)
        connect(m, gate=ig.o, merger=to_tile.i[0])
        self._own_messages(m, "tile", senders["o2t"], senders["i2t"], ig.o, to_tile.i[1])
        heard = to_tile.o
        if self.config.rx_buffer_flits:
            heard = self._rx_buffer(m, heard, releasing)
        # A quarantined tile hears nothing: what is on its way to it (a message it was taking, the
        # monitor's own answers) is drained here, so a tile that stops reading cannot hold up its
        # router port, nor the kernel's messages to the monitor behind it.
        m.d.comb += [
            tile_in.payload.eq(heard.payload),
            tile_in.valid.eq(heard.valid & ~quarantined),
            heard.ready.eq(tile_in.ready | quarantined),
        ]

    def _own_messages(self, m: Module, name: str, a: RequestSender, b: RequestSender,
                      beside: Any, into: Any) -> None:
        """The messages of senders ``a`` and ``b``, merged (``own_to_{name}``), into ``into``, the
        input of a merger whose other input is ``beside``. Where they are one flit (512 bits),
        their :func:`~.monitor_messages.spare_lanes` show ``beside``'s data: lanes where both
        inputs agree need no mux (two of them of 2 inputs: a merger of 3 would give zeros for
        its fourth select value, costing a LUT per lane)."""
        m.submodules[f"own_to_{name}"] = own = MessageMerger(self.env.width, 2)
        connect(m, a=a.o, merger=own.i[0])
        connect(m, b=b.o, merger=own.i[1])
        m.d.comb += [into.valid.eq(own.o.valid), into.payload.eq(own.o.payload),
                     own.o.ready.eq(into.ready)]
        lanes = spare_lanes(self.env.width)
        if lanes is not None:
            lo, hi = lanes
            m.d.comb += into.payload.data[lo:hi].eq(beside.payload.data[lo:hi])

    def _rx_buffer(self, m: Module, messages: Any, releasing: Any) -> Any:
        """``messages`` (to the tile) through a :class:`MessageBuffer` that never waits, emptied
        by ``RELEASE`` (what was for the old tile is not for the new one); returns its output.
        Counts what it drops in ``rx_dropped``."""
        flits = self.config.rx_buffer_flits
        assert flits is not None
        m.submodules.rx_buffer = buf = ResetInserter(releasing)(MessageBuffer(
            self.env.width, buffer_flits=flits, max_flits=flits, always_ready=True))
        connect(m, merger=messages, buffer=buf.i)
        with m.If(buf.dropped):
            count(m, self.counters.rx_dropped)
        return buf.o

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
