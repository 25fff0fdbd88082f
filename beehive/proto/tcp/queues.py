"""The queues both TCP engine tiles use: requests waiting to leave as NoC messages
(:class:`Outbox`), flows waiting for a turn of the engine (:class:`FlowQueue`), and the set of
slots a queue holds (:class:`SlotSet`)."""

from collections.abc import Callable
from typing import Any

from amaranth import Module, Signal
from amaranth.hdl import ShapeLike, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import offer_descriptor
from apiary.os.memory_tile import MEM_META
from apiary.stream.block_queue import deep_queue
from apiary.stream.queue import Queue

from .state import slot_bits


__all__ = ["Outbox", "FlowQueue", "SlotSet", "MEM_REQUEST", "memory_requests"]


#: A request to a memory tile (``LOAD_MEM``, ``STORE_MEM``): its address, its size in bytes
#: and the size (log2) of the ring it wraps in.
MEM_REQUEST = data.StructLayout({"addr": 48, "size": 30, "wrap": 6})


class Outbox(wiring.Component):
    """Hold up to ``depth`` requests of ``layout``, and offer the oldest to a
    :class:`~apiary.noc.framing.MessageSender` as its message's descriptor.

    ``describe(m, request)`` gives the descriptor's fields as :func:`offer_message` takes them
    (``dst``, ``src``, ``msg_type`` and optionally ``payload_bytes``, ``meta``), from the
    request at the head of the queue.

    Latency: a request taken on ``i`` in cycle *t* is offered on ``o`` from cycle *t* + 1 (the
    :class:`~apiary.stream.queue.Queue`'s; with ``fall_through``, from cycle *t* when the
    queue is empty); it leaves the queue in the cycle ``o`` is taken.
    Throughput: one request per cycle. Nothing is dropped: ``i.ready`` is low while the queue
    is full.

    Members
    -------
    i : In(stream.Signature(layout))
        The requests.
    o : Out(stream.Signature(descriptor))
        To the sender's ``i_hdr`` (``descriptor``: its layout).
    """

    def __init__(self, layout: ShapeLike, depth: int, descriptor: data.StructLayout,
                 describe: Callable[[Module, Any], dict[str, Any]], *,
                 fall_through: bool = False) -> None:
        self._layout, self._depth, self._describe = layout, depth, describe
        self._fall_through = fall_through
        super().__init__({"i": In(stream.Signature(layout)),
                          "o": Out(stream.Signature(descriptor))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.queue = queue = Queue(self._layout, self._depth,
                                           fall_through=self._fall_through)
        connect(m, requests=flipped(self.i), queue=queue.i)
        m.d.comb += queue.o.ready.eq(offer_descriptor(m, self.o, queue.o.valid,
                                           **self._describe(m, queue.o.payload)))
        return m


class SlotSet(wiring.Component):
    """A set of flow slots, empty at start: ``has`` says whether ``probe`` is in it,
    combinationally; ``add`` puts ``probe`` in (one not in the set), ``remove`` takes ``drop``
    out (one in the set), both in the same cycle if they are different slots (or the same slot
    not in the set: it is added). Either takes effect at the next clock edge.

    Two memories of a bit per slot, ``a`` and ``b``, each written by one side: a slot is in the
    set while its two bits differ (``add`` writes ``a`` with the inverse of ``b``, ``remove``
    writes ``b`` with ``a``). Read without a clock, each is LUT RAM on an FPGA (a bit per slot,
    a LUT per 64 slots and read port), where a register per slot with two write decoders costs
    a flip-flop and about two LUTs per slot.

    Members
    -------
    probe : In(unsigned(slot_bits(slots)))
    has : Out(1)
    add : In(1)
    drop : In(unsigned(slot_bits(slots)))
    remove : In(1)
    """

    def __init__(self, slots: int) -> None:
        self._slots = slots
        slot = unsigned(slot_bits(slots))
        super().__init__({"probe": In(slot), "has": Out(1), "add": In(1), "drop": In(slot),
                          "remove": In(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        depth = max(2, self._slots)
        m.submodules.a = a = Memory(shape=1, depth=depth, init=[])
        m.submodules.b = b = Memory(shape=1, depth=depth, init=[])
        a_probe, a_drop = a.read_port(domain="comb"), a.read_port(domain="comb")
        b_probe = b.read_port(domain="comb")
        a_w, b_w = a.write_port(), b.write_port()
        m.d.comb += [
            a_probe.addr.eq(self.probe), b_probe.addr.eq(self.probe), a_drop.addr.eq(self.drop),
            self.has.eq(a_probe.data ^ b_probe.data),
            a_w.addr.eq(self.probe), a_w.data.eq(~b_probe.data), a_w.en.eq(self.add),
            b_w.addr.eq(self.drop), b_w.data.eq(a_drop.data), b_w.en.eq(self.remove),
        ]
        return m


class FlowQueue(wiring.Component):
    """The flow slots waiting for a turn, each at most once, in the order they first asked.

    A slot offered on ``i`` is queued unless it already waits (then the offer is merged into
    the waiting one); ``i.ready`` is always high, since the queue has room for every slot.
    ``o`` is the oldest waiting slot; the taker raises ``o.ready`` only while ``o.valid`` is
    high. A slot taken may be queued again from the next cycle on (an offer of it in the cycle
    it is taken is merged into it).

    Latency: a slot offered in cycle *t* to an empty queue is on ``o`` from cycle *t* + 1.
    Throughput: one slot in and one out per cycle.

    Members
    -------
    i : In(stream.Signature(unsigned(slot_bits(flows))))
    o : Out(stream.Signature(unsigned(slot_bits(flows))))
    """

    def __init__(self, flows: int) -> None:
        self._flows = flows
        slot = unsigned(slot_bits(flows))
        super().__init__({"i": In(stream.Signature(slot)), "o": Out(stream.Signature(slot))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        flows = self._flows
        m.submodules.queue = queue = deep_queue(unsigned(slot_bits(flows)), flows)
        connect(m, queue=queue.o, taker=flipped(self.o))
        m.submodules.queued = queued = SlotSet(flows)
        m.d.comb += [queued.drop.eq(self.o.payload), queued.remove.eq(self.o.ready),
                     queued.probe.eq(self.i.payload), self.i.ready.eq(1)]
        with m.If(self.i.valid & ~queued.has):
            m.d.comb += [queue.i.valid.eq(1), queue.i.payload.eq(self.i.payload),
                         queued.add.eq(1)]
        return m


def memory_requests(descriptor: data.StructLayout, *, msg_type: Any, dst: tuple, src: tuple,
                    stores: bool = False, depth: int = 4, fall_through: bool = False) -> Outbox:
    """An :class:`Outbox` of :data:`MEM_REQUEST`: each a ``msg_type`` message to the memory
    tile at ``dst`` from ``src`` with the request in its ``MEM_META``; with ``stores`` its
    payload is the ``size`` bytes to store (``STORE_MEM``), else it has none."""
    def describe(m: Module, request: Any) -> dict[str, Any]:
        meta = Signal(MEM_META)
        m.d.comb += [meta.addr.eq(request.addr), meta.size.eq(request.size),
                     meta.wrap.eq(request.wrap)]
        size = {"payload_bytes": request.size} if stores else {}
        return dict(dst=dst, src=src, msg_type=msg_type, meta=meta, **size)
    return Outbox(MEM_REQUEST, depth, descriptor, describe, fall_through=fall_through)
