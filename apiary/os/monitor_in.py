"""A monitor's incoming side (:mod:`apiary.os.monitor`): what its tile may hear, and the
kernel's messages to the monitor itself."""

from collections.abc import Iterable
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out, Component

from ..noc.gate import Verdict
from ..noc.header import Fbits
from ..stream.counters import CounterSignature, count
from ..tile import TileEnv
from .memory_tile import LOAD_MEM_ACK, MEM_META, STORE_MEM_ACK
from .monitor_messages import (REQUEST, HeadFormat, is_type, judge_members, merge_requests,
                               offered_only_if, request, request_payload)
from .monitor_tables import SEGMENT, command, free_row, ipc_lookup, row_lookup
from .paging import PAGE_ANSWER
from .uapi import OFFSET_BITS, FaultKind, KernelMsgType as K, Status


__all__ = ["IncomingCheck", "MONITOR_TYPES"]

Place = tuple[int, int]

#: Kernel messages the monitor consumes (and ``TLB_FILL`` when it translates by pages).
MONITOR_TYPES = (K.CAP_INSTALL, K.CAP_REVOKE, K.IPC_GRANT, K.RELEASE)


class IncomingCheck(Component):
    """The judge of every message to the tile (the owner of its gate: ``first`` ...
    ``accept``, see :class:`~apiary.noc.gate.MessageGate`), each judged once its head is in.

    In this order:

    * A kernel message to the monitor (``CAP_INSTALL``, ``CAP_REVOKE``, ``IPC_GRANT``,
      ``RELEASE``, paged ``TLB_FILL``) from a tile not of the ``kernel`` is sunk
      (``kernel_denied``); from the kernel it waits while ``to_kernel`` or ``to_tile`` is
      busy, while ``releasing`` (or its TLB is busy), then is consumed: ``CAP_INSTALL`` fills a
      free row (``install``) and answers the tile (``CAP_RESULT`` for an allocation,
      ``CAP_NOTIFY`` for a capability sent to it), or with no free row counts
      ``installs_dropped`` (an allocation gets ``TABLE_FULL`` and its memory goes back:
      ``MM_FREE``); ``CAP_REVOKE`` drops the copies (``revoke``) and acks ``CAP_REVOKED``;
      ``IPC_GRANT`` changes an IPC table (``grant``); ``TLB_FILL`` goes to ``answer``;
      ``RELEASE`` raises ``start_release``; paged, ``TLB_SHOOTDOWN`` (waiting while
      ``shooting``) raises ``shootdown``.
    * While ``quarantined``, and a head cut ``short``: sunk (``sunk_in``).
    * From the kernel, or a source the tile holds an IPC capability in for (``src``): passed
      (``passed_in``); a load or store ack from the kernel gets its virtual address back
      (from the handle in ``tag``, through ``ack``; not when paged).
    * Otherwise sunk (``sunk_in``, ``inbound_denied``) and, when ``to_kernel`` is ready and
      not ``releasing``, reported (``FAULT`` ``INBOUND`` to the error manager, ``reported``).

    Verdicts are combinational: a judged head adds no cycle here. The monitor's own messages
    wait in ``to_kernel`` (a queue), so a kernel message never waits for the NoC.

    Members
    -------
    first, head, decide, short, accept : In; need, verdict, rewritten : Out  (the gate's)
    quarantined, releasing : In(1)
    start_release, reported : Out(1)
    ack : Out(row_lookup(entries))
    src : Out(ipc_lookup())
    free : In(free_row(entries))
    install : Out(command(row=SEGMENT))
    revoke : Out(command(root=16))
    grant : Out(command(dir=2, add=1, x=8, y=8, fbits=4))
    to_tile, to_kernel : Out(stream.Signature(REQUEST))
    answer : Out(stream.Signature(PAGE_ANSWER))  (paged)
    shooting : In(1); shootdown, mem_acked : Out(1)  (paged: a shootdown under way; one taken;
        a load or store ack from the kernel taken, passed or sunk)
    counters : Out(CounterSignature)
    """

    COUNTERS = {
        "passed_in": "messages passed to the tile",
        "sunk_in": "messages to the tile sunk (inbound denials, and while quarantined)",
        "inbound_denied": "messages from a source the tile may not receive from",
        "installs_dropped": "CAP_INSTALLs with no free table entry",
        "kernel_denied": "kernel messages to the monitor from a non-kernel tile, dropped",
    }

    def __init__(self, env: TileEnv, entries: int, *, kernel: Iterable[Place], manager: Place,
                 errors: Place, paged: bool = False) -> None:
        self._fmt = fmt = HeadFormat(env.width)
        self._env, self._entries, self._paged = env, entries, paged
        self._kernel = list(dict.fromkeys(tuple(k) for k in kernel))
        self._manager = (*manager, Fbits.LOCAL0)
        self._errors = (*errors, Fbits.LOCAL0)
        super().__init__({
            **judge_members(env.width, fmt.max_head),
            "quarantined": In(1), "releasing": In(1), "start_release": Out(1),
            "reported": Out(1),
            "ack": Out(row_lookup(entries)), "src": Out(ipc_lookup()),
            "free": In(free_row(entries)), "install": Out(command(row=SEGMENT)),
            "revoke": Out(command(root=16)),
            "grant": Out(command(dir=2, add=1, x=8, y=8, fbits=4)),
            "to_tile": Out(stream.Signature(REQUEST)),
            "to_kernel": Out(stream.Signature(REQUEST)),
            **({"answer": Out(stream.Signature(PAGE_ANSWER)), "shooting": In(1),
                "shootdown": Out(1), "mem_acked": Out(1)} if paged else {}),
            "counters": Out(CounterSignature(self.COUNTERS)),
        })

    def _from_kernel(self, x: Any, y: Any) -> Any:
        if not self._kernel:
            return Const(0)
        return Cat(*((x == kx) & (y == ky) for kx, ky in self._kernel)).any()

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        fmt, c = self._fmt, self.counters
        monitor_types = MONITOR_TYPES + ((K.TLB_FILL, K.TLB_SHOOTDOWN) if self._paged else ())
        value, hdr, mm, km = fmt.views(self.head)
        new = Signal(len(value))
        new_mm = fmt.meta(new, MEM_META)
        itype = hdr.msg_type
        kernel_src = self._from_kernel(hdr.src_x, hdr.src_y)
        src = self.src
        m.d.comb += [
            self.need.eq(fmt.need(self.first, (LOAD_MEM_ACK, STORE_MEM_ACK), monitor_types)),
            new.eq(value), self.rewritten.eq(fmt.flits_of(new)), self.ack.slot.eq(mm.tag),
            src.x.eq(hdr.src_x), src.y.eq(hdr.src_y), src.fbits.eq(hdr.dst_fbits),
        ]
        with m.If(is_type(itype, (LOAD_MEM_ACK, STORE_MEM_ACK)) & kernel_src):
            m.d.comb += new_mm.addr.eq(
                Cat((mm.addr - self.ack.entry.base)[:OFFSET_BITS], mm.tag))
        fill_wait = Signal()            # a TLB_FILL waits for its TLB
        if self._paged:                 # the ack keeps its physical address and tag
            ans = self.answer.payload
            m.d.comb += [new_mm.addr.eq(mm.addr),
                         ans.status.eq(km.status), ans.base.eq(km.addr), ans.size.eq(km.size),
                         ans.mem_x.eq(km.mem_x), ans.mem_y.eq(km.mem_y), ans.perm.eq(km.perm),
                         fill_wait.eq(((itype == K.TLB_FILL.value) & ~self.answer.ready)
                                      | ((itype == K.TLB_SHOOTDOWN.value) & self.shooting)),
                         self.mem_acked.eq(self.decide & self.accept & kernel_src & ~self.short
                                           & is_type(itype, (LOAD_MEM_ACK, STORE_MEM_ACK)))]
        accept = self.decide & self.accept
        to_monitor = is_type(itype, monitor_types) & ~self.short
        busy = ~self.to_kernel.ready | ~self.to_tile.ready | self.releasing
        if self._paged:
            busy = busy | fill_wait
        # Taken (a DROP is taken at once), apart from the verdicts below: what it does (an IPC
        # grant uses the src lookup) must not seem to depend on the other messages' verdicts.
        consumed = Signal()
        m.d.comb += consumed.eq(self.decide & to_monitor & kernel_src & ~busy)
        replies = stream.Signature(REQUEST).create()    # to the kernel's messages
        self._consume(m, itype, hdr, km, replies, consumed)
        offered_only_if(m, consumed, self.revoke.en, self.grant.en, self.install.en,
                        self.start_release, self.to_tile.valid, replies.valid,
                        *([self.answer.valid, self.shootdown] if self._paged else []))
        inbound = stream.Signature(REQUEST).create()    # a denied message's FAULT
        m.d.comb += request_payload(inbound, K.FAULT, self._errors, op=FaultKind.INBOUND,
                                    peer_x=hdr.src_x, peer_y=hdr.src_y,
                                    peer_fbits=hdr.dst_fbits, user=itype | 1 << 8)
        merge_requests(m, self.to_kernel, inbound, replies)

        with m.If(self.decide):
            with m.If(to_monitor):
                with m.If(~kernel_src):
                    m.d.comb += self.verdict.eq(Verdict.DROP)
                    with m.If(self.accept):
                        count(m, c.kernel_denied)
                with m.Else():
                    m.d.comb += self.verdict.eq(Mux(busy, Verdict.WAIT, Verdict.DROP))
            with m.Elif(self.quarantined | self.short):
                m.d.comb += self.verdict.eq(Verdict.DROP)
                with m.If(self.accept):
                    count(m, c.sunk_in)
            with m.Elif(kernel_src | src.allowed):
                m.d.comb += self.verdict.eq(Verdict.PASS)
                with m.If(accept):
                    count(m, c.passed_in)
            with m.Else():
                m.d.comb += self.verdict.eq(Verdict.DROP)
                with m.If(accept):
                    count(m, c.sunk_in)
                    count(m, c.inbound_denied)
                    with m.If(self.to_kernel.ready & ~self.releasing):
                        m.d.comb += [self.reported.eq(1), inbound.valid.eq(1)]
        return m

    def _consume(self, m: Module, itype: Any, hdr: Any, km: Any, to_kernel: Any,
                 consumed: Any) -> None:
        """What a kernel message to the monitor does, its requests to the kernel on
        ``to_kernel``; the caller holds the strobes low but when it is ``consumed``."""
        g = self.grant
        # The commands' fields, and those every request below shares, whatever the type: only
        # their strobes depend on it (a payload set under a condition costs a gate per bit).
        m.d.comb += [self.revoke.root.eq(km.root), to_kernel.payload.meta.root.eq(km.root),
                     self.to_tile.payload.meta.user.eq(km.user),
                     g.dir.eq(km.perm), g.add.eq(km.status == 1), g.x.eq(km.peer_x),
                     g.y.eq(km.peer_y), g.fbits.eq(km.peer_fbits)]
        with m.Switch(itype):
            with m.Case(K.CAP_INSTALL.value):
                self._install(m, km, to_kernel, consumed)
            with m.Case(K.CAP_REVOKE.value):
                m.d.comb += [self.revoke.en.eq(1),
                             *request(to_kernel, K.CAP_REVOKED,
                                      (hdr.src_x, hdr.src_y, hdr.src_fbits))]
            with m.Case(K.IPC_GRANT.value):
                m.d.comb += g.en.eq(1)
            with m.Case(K.TLB_FILL.value):
                if self._paged:
                    m.d.comb += self.answer.valid.eq(1)
            with m.Case(K.TLB_SHOOTDOWN.value):
                if self._paged:
                    m.d.comb += self.shootdown.eq(1)
            with m.Case(K.RELEASE.value):     # of a running tile too: a kill (Release)
                m.d.comb += self.start_release.eq(1)

    def _install(self, m: Module, km: Any, to_kernel: Any, consumed: Any) -> None:
        """``CAP_INSTALL``: into the first free row; answer the tile (``CAP_RESULT`` for an
        allocation, ``CAP_NOTIFY`` for a capability sent to it). With no free row, count it in
        ``installs_dropped``."""
        is_alloc = km.op == K.CAP_ALLOC.value
        ok = km.status == Status.OK
        free, row, tile = self.free, self.install.row, (self._env.x, self._env.y, Fbits.LOCAL0)
        with m.If(consumed & ok & ~free.found):
            count(m, self.counters.installs_dropped)
        m.d.comb += [row.owner.eq(is_alloc), row.base.eq(km.addr), row.size.eq(km.size),
                     row.perm.eq(km.perm), row.mem_x.eq(km.mem_x), row.mem_y.eq(km.mem_y),
                     row.root.eq(km.root)]
        # (Every answer's ``user`` and the MM_FREE's ``root`` are set by the caller.)
        with m.If(ok & free.found):
            m.d.comb += self.install.en.eq(1)
            with m.If(is_alloc):
                m.d.comb += request(self.to_tile, K.CAP_RESULT, tile, op=K.CAP_ALLOC,
                                    status=Status.OK, handle=free.handle, size=km.size,
                                    perm=km.perm)
            with m.Else():
                m.d.comb += request(self.to_tile, K.CAP_NOTIFY, tile, handle=free.handle,
                                    size=km.size, perm=km.perm, peer_x=km.peer_x,
                                    peer_y=km.peer_y)
        with m.Elif(is_alloc):
            status = Mux(ok, Status.TABLE_FULL, km.status)
            m.d.comb += request(self.to_tile, K.CAP_RESULT, tile, op=K.CAP_ALLOC,
                                status=status)
            with m.If(ok):                  # allocated, but nowhere to keep it: give it back
                m.d.comb += request(to_kernel, K.MM_FREE, self._manager)
