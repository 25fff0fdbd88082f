"""The TCP engine under Apiary: each connection's rings are segments from the memory manager.

A TCP tile placed untrusted (behind an Apiary monitor, ``trusted=False``) owns no memory of
its own. The receive tile allocates every connection's receive and send rings through its
monitor (``CAP_ALLOC``, :mod:`apiary.os.uapi`), hands the send ring to the transmit tile and
both rings to the connection's application with ``CAP_SEND`` (the thesis's §3.4.3: "these
capability messages also serve as the notification of an opened connection"), and addresses
them as ``handle << 40 | offset``, so its monitor checks and translates every access.

Kernel messages of the engine:

==============  ============================  ====================================================
message         from → to                     ``KERNEL_META`` fields
==============  ============================  ====================================================
``CAP_ALLOC``   receive tile → its monitor    ``size`` (``rx_ring`` or ``tx_ring``), ``perm`` RW,
                                              ``user`` :data:`ALLOC_RX` or :data:`ALLOC_TX`
``CAP_SEND``    receive tile → its monitor    the send ring to the transmit tile (``perm``
                                              READ, ``user`` a :data:`GRANT_USER` of the flow,
                                              kind SEND); a connection's receive ring (READ) and
                                              send ring (WRITE) to its application (``user``:
                                              flow, kind, ``size_log2``), in that order
``CAP_FREE``    receive tile → its monitor    a connection's two rings, when its flow slot is
                                              taken by the next connection (the manager revokes
                                              the copies the transmit tile and the application
                                              hold)
``CAP_NOTIFY``  monitor → transmit tile,      ``handle`` (the receiver's own), ``user`` as sent
                application
==============  ============================  ====================================================

Rings are allocated ahead: :class:`BufferPool` keeps ``spare`` pairs (receive ring, send ring)
ready, so a SYN (or an application's open) takes a pair at once and the allocation of the next
one is off the connection's path; with no pair ready a SYN is dropped (``syn_dropped``; the peer
sends it again) and an open is answered ``BUSY``, as with no free flow slot. A pair stays with
its slot after the connection ends (its application may still read what it was sent) and is
freed when the slot's next connection takes a new one, so the engine holds at most
``flows + spare`` pairs.
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from apiary.os.uapi import KERNEL_META, KernelMsgType as K, Perm, Status
from apiary.stream.queue import Queue

from .app import BufferKind


__all__ = ["GRANT_USER", "KERNEL_REQUEST", "ALLOC_RX", "ALLOC_TX", "RING_PAIR", "RING_JOB",
           "POOL_PORT", "BufferPool"]


#: The ``user`` word of a ring's ``CAP_SEND``: the flow handle, which ring, its size.
GRANT_USER = data.StructLayout({"flow": 16, "kind": 2, "size_log2": 6})
#: A kernel message the engine sends to its monitor.
KERNEL_REQUEST = data.StructLayout({"msg_type": 8, "meta": KERNEL_META})
#: ``CAP_ALLOC.user`` of a receive ring and of a send ring.
ALLOC_RX, ALLOC_TX = 1, 2
#: Cycles before an allocation the manager refused is asked again.
RETRY_CYCLES = 1024

#: A pair of rings (their handles), and a pair taken: the flow it goes to, the slot's previous
#: pair to free.
RING_PAIR = data.StructLayout({"rx": 8, "tx": 8})
RING_JOB = data.StructLayout({"old": 1, "old_rx": 8, "old_tx": 8, "tx": 8, "flow": 16})
#: The engine's side of a :class:`BufferPool` (``Out`` on the engine): ``ready``, ``pair``,
#: ``take``, ``take_job`` as the pool has them.
POOL_PORT = wiring.Signature({"ready": In(1), "pair": In(RING_PAIR), "take": Out(1),
                              "take_job": Out(RING_JOB)})
#: A connection's ring granted to its application (from the receive tile's notifications).
GRANT = data.StructLayout({"handle": 8, "kind": 2, "size_log2": 6, "flow": 16,
                           "x": 8, "y": 8, "fbits": 4})


class BufferPool(Elaboratable):
    """The receive tile's allocator of connection rings (see the module docstring).

    * ``ready``, ``pair`` (``rx``, ``tx`` handles): a pair is on offer; ``take`` (one cycle)
      takes it, with ``take_job``: the flow it goes to and the slot's previous pair (``old``,
      ``old_rx``, ``old_tx``) to free. ``ready`` also says there is room for that job.
    * ``grants``: rings to hand to applications (:data:`GRANT`), sent in order.
    * ``result_valid``, ``result`` (a :data:`KERNEL_META` view): the monitor's ``CAP_RESULT``
      messages, taken every cycle.
    * ``requests``: the kernel messages to send (:data:`KERNEL_REQUEST`), one at a time.
    * ``tx_x``, ``tx_y``, ``tx_fbits``: the transmit tile, which gets every send ring.
    * ``alloc_failed``, ``grant_failed``: allocations refused (no memory, a full capability
      table: asked again after :data:`RETRY_CYCLES`), and sends or frees refused.

    Cost: one allocation in flight; per pair, two ``CAP_ALLOC`` round trips through the
    monitor and the memory manager.
    """

    def __init__(self, *, rx_ring: int, tx_ring: int, spare: int = 2) -> None:
        self.rx_ring, self.tx_ring, self.spare = rx_ring, tx_ring, spare
        self.ready = Signal()
        self.pair = Signal(RING_PAIR)
        self.take = Signal()
        self.take_job = Signal(RING_JOB)
        self.grants = stream.Signature(GRANT).flip().create()
        self.result_valid = Signal()
        self.result = Signal(KERNEL_META)
        self.requests = stream.Signature(KERNEL_REQUEST).create()
        self.tx_x, self.tx_y, self.tx_fbits = Signal(8), Signal(8), Signal(4)
        self.alloc_failed = Signal(32)
        self.grant_failed = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.pairs = pairs = Queue(RING_PAIR, self.spare)
        m.submodules.jobs = jobs = Queue(RING_JOB, 4)
        m.d.comb += [self.ready.eq(pairs.o.valid & jobs.i.ready), self.pair.eq(pairs.o.payload),
                     pairs.o.ready.eq(self.take), jobs.i.valid.eq(self.take),
                     jobs.i.payload.eq(self.take_job)]

        # Allocation: the two rings of a pair one after the other, then the pair is spare. The
        # order alternates from pair to pair, so that a manager placing allocations in turn
        # over its memories spreads the receive rings (and the send rings) over them.
        res = self.result
        is_alloc = self.result_valid & (res.op == K.CAP_ALLOC.value)
        ok = res.status == Status.OK
        asking = Signal()           # a CAP_ALLOC is out
        have = Signal(RING_PAIR)        # the rings of the next pair allocated so far
        got = Signal(2)             # ... which of them (bit 0 receive, bit 1 send)
        tx_first = Signal()         # this pair's send ring is asked for first
        wait = Signal(range(RETRY_CYCLES + 1))
        alloc_now = Signal()        # offer a CAP_ALLOC this cycle
        ask_tx = Signal()           # ... for the send ring
        m.d.comb += [alloc_now.eq(~asking & (wait == 0) & pairs.i.ready),
                     ask_tx.eq(Mux(got == 0, tx_first, got[0]))]
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        is_rx = res.user == ALLOC_RX
        m.d.comb += [pairs.i.payload.rx.eq(Mux(is_rx, res.handle, have.rx)),
                     pairs.i.payload.tx.eq(Mux(is_rx, have.tx, res.handle))]
        with m.If(is_alloc):
            m.d.sync += asking.eq(0)
            with m.If(~ok):
                m.d.sync += [wait.eq(RETRY_CYCLES), self.alloc_failed.eq(self.alloc_failed + 1)]
            with m.Elif(got != 0):
                m.d.comb += pairs.i.valid.eq(1)
                m.d.sync += [got.eq(0), tx_first.eq(~tx_first)]
            with m.Elif(is_rx):
                m.d.sync += [have.rx.eq(res.handle), got.eq(0b01)]
            with m.Else():
                m.d.sync += [have.tx.eq(res.handle), got.eq(0b10)]
        with m.If(self.result_valid & ~is_alloc & ~ok):
            m.d.sync += self.grant_failed.eq(self.grant_failed + 1)

        # One request at a time: a job's steps (free the old rings, send the new send ring to
        # the transmit tile), then a grant, then an allocation.
        req = self.requests
        step = Signal(2)            # of the job at the head of `jobs`: 0, 1 free; 2 send
        job = jobs.o.payload
        grant = self.grants.payload
        meta = req.payload.meta
        with m.If(jobs.o.valid):
            m.d.comb += req.valid.eq(1)
            with m.If((step == 0) & job.old):
                m.d.comb += [req.payload.msg_type.eq(K.CAP_FREE.value), meta.handle.eq(job.old_rx)]
            with m.Elif((step == 1) & job.old):
                m.d.comb += [req.payload.msg_type.eq(K.CAP_FREE.value), meta.handle.eq(job.old_tx)]
            with m.Else():
                m.d.comb += [
                    req.payload.msg_type.eq(K.CAP_SEND.value), meta.handle.eq(job.tx),
                    meta.size.eq(self.tx_ring), meta.perm.eq(Perm.READ),
                    meta.peer_x.eq(self.tx_x), meta.peer_y.eq(self.tx_y),
                    meta.peer_fbits.eq(self.tx_fbits),
                    meta.user.eq(Cat(job.flow, Const(BufferKind.SEND, 2),
                                     Const(self.tx_ring.bit_length() - 1, 6))),
                ]
            with m.If(req.ready):
                last = (step == 2) | ~job.old & (step == 0)
                m.d.sync += step.eq(step + 1)
                with m.If(last):
                    m.d.sync += step.eq(0)
                    m.d.comb += jobs.o.ready.eq(1)
        with m.Elif(self.grants.valid):
            m.d.comb += [
                req.valid.eq(1), req.payload.msg_type.eq(K.CAP_SEND.value),
                meta.handle.eq(grant.handle), meta.size.eq(1 << grant.size_log2),
                meta.perm.eq(Cat(grant.kind == BufferKind.RECEIVE, grant.kind == BufferKind.SEND)),
                meta.peer_x.eq(grant.x), meta.peer_y.eq(grant.y), meta.peer_fbits.eq(grant.fbits),
                meta.user.eq(Cat(grant.flow, grant.kind, grant.size_log2)),
                self.grants.ready.eq(req.ready),
            ]
        with m.Elif(alloc_now):
            m.d.comb += [req.valid.eq(1), req.payload.msg_type.eq(K.CAP_ALLOC.value),
                         meta.perm.eq(Perm.RW), meta.size.eq(self.rx_ring),
                         meta.user.eq(ALLOC_RX)]
            with m.If(ask_tx):
                m.d.comb += [meta.size.eq(self.tx_ring), meta.user.eq(ALLOC_TX)]
            with m.If(req.ready):
                m.d.sync += asking.eq(1)
        return m
