"""The FLD module: what sits between an accelerator and a NIC's PCIe interface (FlexDriver §5,
Figure 3), its receive side (:class:`~flexdriver.rx_path.RxPath`) and transmit side
(:class:`~flexdriver.tx_path.TxPath`) behind one memory-mapped window.

The NIC's view of the FPGA (:class:`FldMap`, addresses in the NIC's DMA space):

==============  ==========================================================================
window          what the NIC does there
==============  ==========================================================================
``rq_ring``     reads its receive descriptors (one ring of ``rq_entries``, shared by the
                ``rx_queues`` receive queues, striding): FLD keeps none, it answers a read of
                position ``i`` with the descriptor of buffer ``i mod buffers`` (16 bytes,
                built on the fly)
``rx_buffers``  writes received packets (``buffers`` × ``buffer_bytes``, several packets a
                buffer, each from a stride of ``stride_bytes``)
``rx_cq``       writes receive completions (``rx_cq_entries`` CQEs)
``sq_rings``    reads transmit WQEs (``queues`` rings of ``ring_entries``), expanded from the
                shared descriptor pool
``tx_buffer``   reads the packets' bytes (``pages`` of ``page_bytes``, shared by the queues;
                each packet in a range of its own, see :mod:`flexdriver.tx_path`)
``tx_cq``       writes transmit completions (``tx_cq_entries`` CQEs)
==============  ==========================================================================

Ports: ``nic_read`` / ``nic_data`` (the NIC's reads and their answers, a word a cycle, ``last``
on each answer's last; a read outside every window is answered with zeros and counted in
``stray_reads``), ``pcie_write`` (the NIC's writes, always taken), ``doorbell`` (what FLD asks of
the NIC: :class:`Doorbell` ``kind`` and ``queue``, ``value`` the new producer or consumer index);
the accelerator's: ``rx`` (packets out, never waiting: see :mod:`flexdriver.rx_path`), ``tx``
(packets in, with credits: see :mod:`flexdriver.tx_path`), ``credit_queue`` and ``credit``;
``rx_dropped_queue`` and ``rx_dropped`` (the drops of that receive queue), ``tx_dropped_queue``
and ``tx_dropped`` (of that send queue).
"""

import math
from dataclasses import dataclass
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.stream.counters import CounterSignature
from apiary.stream.layout import payload_layout
from apiary.stream.sizing import LinkSizing, pow2_at_least

from .descriptors import pcie_write_layout
from .formats import CQE_BYTES, RX_DESC_BYTES, WQE_BYTES, RxDesc
from .rx_path import RxPath, rx_meta
from .tx_path import TxPath, nic_read_layout, tx_meta


__all__ = ["Fld", "FldMap", "FldTop", "Doorbell", "accelerator_members"]


class Doorbell(enum.Enum, shape=2):
    """What a doorbell rings: a send queue's producer index, the transmit completion queue's
    consumer index, a receive queue's producer index, the receive completion queue's consumer
    index."""
    SQ = 0
    TX_CQ = 1
    RQ = 2
    RX_CQ = 3


@dataclass(frozen=True)
class FldMap:
    """Where FLD's windows are in the NIC's DMA space (see the module docstring), and their
    sizes."""
    queues: int = 2
    rx_queues: int = 1
    ring_entries: int = 64
    pool_entries: int = 64
    pages: int = 128
    page_bytes: int = 256
    max_packet: int = 2048
    buffers: int = 4
    buffer_bytes: int = 8192
    stride_bytes: int = 256
    rq_entries: int = 4
    rx_cq_entries: int = 64
    tx_cq_entries: int = 64
    rq_ring: int = 0x0000_8000
    rx_cq: int = 0x0001_0000
    tx_cq: int = 0x0002_0000
    sq_rings: int = 0x0100_0000
    rx_buffers: int = 0x1000_0000
    tx_buffer: int = 0x2000_0000

    @classmethod
    def sized(cls, link: LinkSizing | None = None) -> "FldMap":
        """FLD sized for ``link`` as FlexDriver's Table 3 sizes it (by default its Table 2a:
        100 Gb/s, 512 send queues, packets of 256 B to 16 KiB, lifetimes of 5 µs receiving and
        25 µs sending): each send queue's ring, the descriptor pool and the transmit
        completions f(N_txdesc); 2 × the transmit BDP in pages of the smallest packet, packets
        up to the largest; 2 × the receive BDP in striding buffers of two largest packets (so
        that a packet wastes at most half a buffer; a power of two of them), strides of the
        smallest packet; the receive ring and completions f(N_rxdesc); a receive queue for each
        send queue. The windows are laid out one after another, each aligned to its size."""
        link = link or LinkSizing()
        tx_desc, rx_desc = pow2_at_least(link.tx_descriptors), pow2_at_least(link.rx_descriptors)
        buffer_bytes = 2 * link.max_packet
        buffers = pow2_at_least(math.ceil(2 * link.rx_bdp / buffer_bytes))
        pages = math.ceil(2 * link.tx_bdp / link.min_packet)
        sizes = {"rq_ring": max(rx_desc, buffers) * RX_DESC_BYTES,
                 "rx_cq": rx_desc * CQE_BYTES, "tx_cq": tx_desc * CQE_BYTES,
                 "sq_rings": link.queues * tx_desc * WQE_BYTES,
                 "rx_buffers": buffers * buffer_bytes,
                 "tx_buffer": pages * pow2_at_least(link.max_packet)}
        at, windows = 0x1000, {}
        for name, size in sizes.items():
            align = pow2_at_least(size)
            at = -(-at // align) * align
            windows[name] = at
            at += size
        return cls(queues=link.queues, rx_queues=link.queues, ring_entries=tx_desc,
                   pool_entries=tx_desc, pages=pages, page_bytes=link.min_packet,
                   max_packet=link.max_packet, buffers=buffers, buffer_bytes=buffer_bytes,
                   stride_bytes=link.min_packet, rq_entries=max(rx_desc, buffers),
                   rx_cq_entries=rx_desc, tx_cq_entries=tx_desc, **windows)

    def rx_desc(self, index: int) -> RxDesc:
        """The receive descriptor FLD answers at position ``index`` of the receive ring."""
        return RxDesc(self.rx_buffers + index % self.buffers * self.buffer_bytes,
                      self.buffer_bytes)


class Fld(wiring.Component):
    """See the module docstring: FLD at data width ``width`` with the windows of ``fld_map``."""

    def __init__(self, width: int, fld_map: FldMap | None = None) -> None:
        fld_map = fld_map or FldMap()
        self.width, self.map = width, fld_map
        f = fld_map
        if not (f.rq_entries >= f.buffers and f.rq_entries % f.buffers == 0
                and f.rq_entries & (f.rq_entries - 1) == 0):
            raise ValueError(f"rq_entries must be a power of two and a multiple of buffers "
                             f"({f.buffers}), not {f.rq_entries!r}")
        self.rx_path = RxPath(width=width, buffers=f.buffers, buffer_bytes=f.buffer_bytes,
                              stride_bytes=f.stride_bytes, rx_base=f.rx_buffers,
                              cq_base=f.rx_cq, cq_entries=f.rx_cq_entries,
                              queues=f.rx_queues)
        self.tx_path = TxPath(width=width, queues=f.queues, ring_entries=f.ring_entries,
                              pool_entries=f.pool_entries, pages=f.pages,
                              page_bytes=f.page_bytes, max_packet=f.max_packet,
                              ring_base=f.sq_rings,
                              window=f.tx_buffer, cq_base=f.tx_cq,
                              cq_entries=f.tx_cq_entries)
        qbits = max(1, (max(f.queues, f.rx_queues) - 1).bit_length())
        rx_sig, tx_sig = self.rx_path.signature.members, self.tx_path.signature.members
        super().__init__({
            "nic_read": In(stream.Signature(nic_read_layout())),
            "nic_data": Out(stream.Signature(data.StructLayout({"data": width, "last": 1}))),
            "pcie_write": In(stream.Signature(pcie_write_layout(width))),
            "doorbell": Out(stream.Signature(data.StructLayout({
                "kind": Doorbell, "queue": qbits, "value": 16}))),
            "rx": rx_sig["packets"],
            "rx_accept": rx_sig["accept"],
            "tx": tx_sig["packets"],
            "credit_queue": tx_sig["credit_queue"],
            "credit": tx_sig["credit"],
            "rx_dropped_queue": rx_sig["dropped_queue"],
            "rx_dropped": rx_sig["dropped"],
            "tx_dropped_queue": tx_sig["dropped_queue"],
            "tx_dropped": tx_sig["dropped"],
            "stray_reads": Out(32),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.rx_path = rx = self.rx_path
        m.submodules.tx_path = tx = self.tx_path
        connect(m, rx=rx.packets, fld=flipped(self.rx))
        connect(m, fld=flipped(self.tx), tx=tx.packets)
        m.d.comb += [tx.credit_queue.eq(self.credit_queue), self.credit.eq(tx.credit),
                     rx.dropped_queue.eq(self.rx_dropped_queue), self.rx_dropped.eq(rx.dropped),
                     rx.accept.eq(self.rx_accept),
                     tx.dropped_queue.eq(self.tx_dropped_queue), self.tx_dropped.eq(tx.dropped),
                     self.stray_reads.eq(tx.stray_reads)]
        # The NIC's writes go to both sides, each taking what falls in its windows.
        m.d.comb += [self.pcie_write.ready.eq(1)]
        for side in (rx.pcie_write, tx.pcie_write):
            m.d.comb += [side.valid.eq(self.pcie_write.valid),
                         side.payload.eq(self.pcie_write.payload)]
        self._reads(m, tx)
        # Doorbells: the receive side's first (one per packet), then the transmit side's.
        d = self.doorbell
        with m.If(rx.doorbell.valid):
            r = rx.doorbell.payload
            m.d.comb += [d.valid.eq(1),
                         d.payload.kind.eq(Mux(r.cq, Doorbell.RX_CQ, Doorbell.RQ)),
                         d.payload.queue.eq(r.queue), d.payload.value.eq(r.value),
                         rx.doorbell.ready.eq(d.ready)]
        with m.Else():
            m.d.comb += [d.valid.eq(tx.doorbell.valid),
                         d.payload.kind.eq(Mux(tx.doorbell.payload.cq, Doorbell.TX_CQ,
                                               Doorbell.SQ)),
                         d.payload.queue.eq(tx.doorbell.payload.queue),
                         d.payload.value.eq(tx.doorbell.payload.value),
                         tx.doorbell.ready.eq(d.ready)]
        return m

    def _reads(self, m: Module, tx: TxPath) -> None:
        """The NIC's reads: of the receive ring, answered here; the rest by the transmit
        side."""
        f, nb = self.map, self.width // 8
        req, out = self.nic_read.payload, self.nic_data
        offset = Signal(64)
        m.d.comb += offset.eq(req.address - f.rq_ring)
        in_rq = (req.address >= f.rq_ring) & (offset < f.rq_entries * RX_DESC_BYTES)
        index = Signal(range(f.buffers))            # the buffer at that position
        word = Signal(range(RX_DESC_BYTES // nb + 2))
        words = max(1, RX_DESC_BYTES // nb)
        # The descriptor of that buffer (RxDesc.pack: length, key, address; big-endian).
        address = (Const(f.rx_buffers, 64) + index * f.buffer_bytes)[:64]
        desc = Cat(*(Const(f.buffer_bytes, 32).as_unsigned()[8 * (3 - k):8 * (4 - k)]
                     for k in range(4)), Const(0, 32),
                   *(address[8 * (7 - k):8 * (8 - k)] for k in range(8)))
        with m.FSM(name="reads"):
            with m.State("IDLE"):
                with m.If(self.nic_read.valid & in_rq):
                    m.d.comb += self.nic_read.ready.eq(1)
                    m.d.sync += [index.eq(offset[4:4 + len(index)] if len(index) else 0),
                                 word.eq(0)]
                    m.next = "RQ"
                with m.Else():
                    m.d.comb += [tx.nic_read.valid.eq(self.nic_read.valid),
                                 tx.nic_read.payload.eq(req),
                                 self.nic_read.ready.eq(tx.nic_read.ready)]
                    with m.If(self.nic_read.valid & tx.nic_read.ready):
                        m.next = "TX"
            with m.State("TX"):
                connect(m, tx=tx.nic_data, fld=flipped(out))
                with m.If(out.valid & out.ready & out.payload.last):
                    m.next = "IDLE"
            with m.State("RQ"):
                if words > 1:
                    lanes = [desc[k * self.width:(k + 1) * self.width] for k in range(words)]
                    m.d.comb += out.payload.data.eq(Mux(word == 0, lanes[0], lanes[1]))
                else:
                    m.d.comb += out.payload.data.eq(desc)
                m.d.comb += [out.valid.eq(1), out.payload.last.eq(word == words - 1)]
                with m.If(out.ready):
                    m.d.sync += word.eq(word + 1)
                    with m.If(word == words - 1):
                        m.next = "IDLE"


def accelerator_members(width: int, *, queues: int, rx_queues: int,
                        counters: dict[str, str]) -> dict[str, Any]:
    """The members of an accelerator behind FLD (:class:`FldTop`): ``rx`` (FLD's receive
    stream, taken without waiting), ``tx`` (its transmit stream), ``credit_queue`` (the send
    queue it asks about) and ``credit`` (that queue's credit),
    and ``counters`` (:class:`~apiary.stream.counters.CounterSignature` of ``counters``)."""
    def word(meta: data.StructLayout) -> data.StructLayout:
        return data.StructLayout({**dict(payload_layout(width).members.items()), "meta": meta})
    return {"rx": In(stream.Signature(word(rx_meta(rx_queues)))),
            "tx": Out(stream.Signature(word(tx_meta(queues)))),
            "credit_queue": Out(max(1, (queues - 1).bit_length())),
            "credit": In(16),
            "counters": Out(CounterSignature(counters))}


class FldTop(wiring.Component):
    """FLD with an accelerator behind it: ``accelerator`` has FLD's accelerator side (``rx``,
    ``tx``, ``credit_queue``, ``credit``) and ``counters``; the top has FLD's NIC side (its
    ports passed through), FLD's drops and the accelerator's counters."""

    def __init__(self, width: int, accelerator: wiring.Component,
                 fld_map: FldMap | None = None) -> None:
        fld_map = fld_map or FldMap()
        self.fld, self.accelerator = Fld(width, fld_map), accelerator
        self.width, self.map = width, fld_map
        members = self.fld.signature.members
        super().__init__({name: members[name] for name in
                          ("nic_read", "nic_data", "pcie_write", "doorbell", "rx_dropped_queue",
                           "rx_dropped", "tx_dropped_queue", "tx_dropped", "stray_reads")}
                         | {"counters": accelerator.signature.members["counters"]})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.fld = fld = self.fld
        m.submodules.accelerator = acc = self.accelerator
        for name in ("nic_read", "pcie_write"):
            connect(m, top=flipped(getattr(self, name)), fld=getattr(fld, name))
        for name in ("nic_data", "doorbell"):
            connect(m, fld=getattr(fld, name), top=flipped(getattr(self, name)))
        connect(m, fld=fld.rx, accelerator=acc.rx)
        connect(m, accelerator=acc.tx, fld=fld.tx)
        connect(m, accelerator=acc.counters, top=flipped(self.counters))
        m.d.comb += [fld.rx_dropped_queue.eq(self.rx_dropped_queue),
                     self.rx_dropped.eq(fld.rx_dropped),
                     fld.tx_dropped_queue.eq(self.tx_dropped_queue),
                     self.tx_dropped.eq(fld.tx_dropped), self.stray_reads.eq(fld.stray_reads)]
        m.d.comb += [fld.credit_queue.eq(acc.credit_queue), acc.credit.eq(fld.credit)]
        return m
