"""The control agent: one position's counters, registers and tables on the control plane.

A design with a control plane has an agent at every tile position that has counters or
registers (:class:`~apiary.top.DesignTop` builds them). The agent takes ``CTL_READ`` and
``CTL_WRITE`` messages (:mod:`apiary.control.messages`) addressed to its position at sub-port
:data:`~apiary.control.messages.AGENT_FBITS`, serves them from the position's address map
(:mod:`apiary.control.addrmap`) and answers each with one ``CTL_ACK`` to the request's source.

It holds the tile's registers (driving the tile's ``regs`` member, at their reset values until
written), a staging buffer per table, and reads the position's counters as they are.

Latency: the ``CTL_ACK``'s first flit leaves 1 cycle after the request's last flit arrives (a
``LOAD`` of a table entry: 3 cycles, the table's read time). Throughput: one request at a time;
the next is taken once the answer has left. The agent holds its input while its answer waits
for the output, so on the control plane's resource-dependency graph it is a streaming tile.

Messages of another type, and malformed ones (cut short, with the wrong number of metadata
flits), are taken and discarded, counted in ``dropped``.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..noc.flit import flit_signature
from ..noc.framing import MessageReceiver, MessageSender, offer_message
from ..stream.counters import CounterSignature
from ..stream.registers import Register, RegisterSignature
from .addrmap import WORD_BITS, MapEntry, TileMap
from .messages import AGENT_FBITS, CTL_ACK, CTL_META, CTL_READ, CTL_WRITE, CtlStatus


__all__ = ["ControlAgent"]


class ControlAgent(wiring.Component):
    """Serve the address map ``tmap`` on the control plane (see the module docstring).

    Parameters
    ----------
    width : int
        Control-plane flit width.
    tmap : TileMap
        The position's address map, built from ``counters`` and ``registers``
        (:meth:`TileMap.build`); its ``x``, ``y`` are the agent's position.
    counters : sequence of (prefix, CounterSignature)
        The counter signatures at the position, as given to :meth:`TileMap.build`.
    registers : RegisterSignature or None

    Members
    -------
    ctl_in : In(flit_signature(width))
        Requests from the position's router.
    ctl_out : Out(flit_signature(width))
        Answers to the router.
    counters_<k> : In(CounterSignature)
        The ``k``-th counter signature of ``counters``.
    regs : Out(RegisterSignature)
        The tile's registers and table ports (if ``registers`` is given).
    dropped : Out(32)
        Messages of another type than ``CTL_READ`` / ``CTL_WRITE``, or malformed.
    """

    def __init__(self, width: int, tmap: TileMap,
                 counters: Sequence[tuple[str, CounterSignature]] = (),
                 registers: RegisterSignature | None = None) -> None:
        self._width = width
        self._tmap = tmap
        self._counters = list(counters)
        self._registers = registers
        members: dict[str, Any] = {
            "ctl_in": In(flit_signature(width)),
            "ctl_out": Out(flit_signature(width)),
            "dropped": Out(32),
        }
        for k, (_, sig) in enumerate(self._counters):
            members[f"counters_{k}"] = In(sig)
        if registers is not None:
            members["regs"] = Out(registers)
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, tmap = self._width, self._tmap
        m.submodules.receiver = rx = MessageReceiver(width, meta_bits=CTL_META.size)
        m.submodules.sender = tx = MessageSender(width, meta_bits=CTL_META.size)
        connect(m, agent=flipped(self.ctl_in), receiver=rx.i)
        connect(m, sender=tx.o, agent=flipped(self.ctl_out))
        m.d.comb += rx.o_data.ready.eq(1)
        wrong_type = Signal(32)
        m.d.comb += self.dropped.eq(wrong_type + rx.errors)

        src_x, src_y, src_fbits = Signal(8), Signal(8), Signal(4)
        tag, addr = Signal(8), Signal(16)
        wdata, is_write = Signal(32), Signal()
        rdata, status = Signal(32), Signal(4)
        req = CTL_META(rx.o_hdr.payload.meta)

        # Every readable word: counters, registers, table staging words.
        words: dict[int, Any] = {}
        writable: dict[int, Any] = {}     # addr -> callable(m, data) doing the write
        for k, (prefix, sig) in enumerate(self._counters):
            port = getattr(self, f"counters_{k}")
            for counter in sig.members:
                entry = tmap[f"{prefix}{counter}"]
                value = getattr(port, counter)
                for w in range(entry.words):
                    words[entry.addr + w] = value.word_select(w, WORD_BITS) \
                        if value.shape().width > WORD_BITS else value

        tables = []
        if self._registers is not None:
            for name, spec in self._registers.registers.items():
                entry = tmap[name]
                target = getattr(self.regs, name)
                if isinstance(spec, Register):
                    padded = Signal(entry.words * WORD_BITS, name=f"{name}_words")
                    m.d.comb += padded.eq(target)
                    for w in range(entry.words):
                        words[entry.addr + w] = padded.word_select(w, WORD_BITS)
                        writable[entry.addr + w] = (target, w)
                else:
                    staging = Signal(entry.words * WORD_BITS, name=f"{name}_staging")
                    for w in range(entry.words):
                        words[entry.addr + w] = staging.word_select(w, WORD_BITS)
                        if spec.writable:
                            writable[entry.addr + w] = (staging, w)
                    r_index = Signal.like(target.r_index, name=f"{name}_r_index")
                    m.d.comb += target.r_index.eq(r_index)
                    tables.append(_TableState(spec.writable, entry, target, staging, r_index))

        with m.Switch(addr):
            for a, value in words.items():
                with m.Case(a):
                    m.d.comb += rdata.eq(value)

        load_wait = Signal(2)
        load_target = Signal(range(max(1, len(tables))))

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += rx.o_hdr.ready.eq(1)
                with m.If(rx.o_hdr.valid):
                    hdr = rx.o_hdr.payload
                    m.d.sync += [
                        src_x.eq(hdr.src_x), src_y.eq(hdr.src_y), src_fbits.eq(hdr.src_fbits),
                        tag.eq(req.tag), addr.eq(req.addr), wdata.eq(req.data),
                        is_write.eq(hdr.msg_type == CTL_WRITE),
                    ]
                    with m.If((hdr.msg_type == CTL_READ)
                              | (hdr.msg_type == CTL_WRITE)):
                        m.next = "EXECUTE"
                    with m.Else():
                        m.d.sync += wrong_type.eq(wrong_type + 1)
            with m.State("EXECUTE"):
                m.next = "ANSWER"
                m.d.sync += status.eq(CtlStatus.BAD_ADDR)
                with m.Switch(addr):
                    for a in words:
                        with m.Case(a):
                            if a in writable:
                                target, w = writable[a]
                                m.d.sync += status.eq(CtlStatus.OK)
                                with m.If(is_write):
                                    if target.shape().width > WORD_BITS or w:
                                        m.d.sync += target.word_select(w, WORD_BITS).eq(wdata)
                                    else:
                                        m.d.sync += target.eq(wdata)
                            else:
                                m.d.sync += status.eq(_refused(is_write))
                    for t, table in enumerate(tables):
                        if table.writable:
                            with m.Case(table.entry.commit):
                                m.d.sync += status.eq(CtlStatus.OK)
                                with m.If(is_write):
                                    m.d.comb += [
                                        table.port.w_valid.eq(1),
                                        table.port.w_index.eq(wdata),
                                        table.port.w_data.eq(table.staging),
                                    ]
                        with m.Case(table.entry.load):
                            m.d.sync += status.eq(CtlStatus.OK)
                            with m.If(is_write):
                                m.d.sync += [table.r_index.eq(wdata), load_target.eq(t),
                                             load_wait.eq(2)]
                                m.next = "LOAD"
            with m.State("LOAD"):
                m.d.sync += load_wait.eq(load_wait - 1)
                with m.If(load_wait == 1):
                    with m.Switch(load_target):
                        for t, table in enumerate(tables):
                            with m.Case(t):
                                m.d.sync += table.staging.eq(table.port.r_data)
                    m.next = "ANSWER"
            with m.State("ANSWER"):
                meta = Signal(CTL_META)
                m.d.comb += [
                    meta.tag.eq(tag), meta.addr.eq(addr), meta.status.eq(status),
                    meta.data.eq(wdata),
                ]
                with m.If(~is_write & (status == CtlStatus.OK)):
                    m.d.comb += meta.data.eq(rdata)
                ready = offer_message(m, tx, 1, dst=(src_x, src_y, src_fbits),
                                      src=(tmap.x, tmap.y, AGENT_FBITS),
                                      msg_type=CTL_ACK, meta=meta.as_value())
                with m.If(ready):
                    m.next = "IDLE"
        return m


@dataclass
class _TableState:
    writable: bool
    entry: MapEntry
    port: Any           # the table's TableSignature port
    staging: Signal
    r_index: Signal


def _refused(write: Any) -> Any:
    """``READ_ONLY`` for a write to a word that cannot be written, ``OK`` for a read of it."""
    return Mux(write, CtlStatus.READ_ONLY, CtlStatus.OK)
