"""Per-queue transmit credits (FlexDriver §5.5), the service's side: one bounded queue per sending
tile in front of a shared service, each drained at its own rate, credits returned as it drains.

Messages in: anything, from the tiles in ``sources`` (the queue is chosen by the message's
``src_x, src_y``, which a tile behind an Apiary monitor cannot forge). Messages out: the same
messages, to the tile's next hop (key ``None``), with this tile as source; and ``TX_CREDIT``
(:mod:`apiary.tiles.tx_credit`) to each source as its messages leave.
"""

from collections.abc import Sequence
from typing import Any, cast

from amaranth import Module, Mux, Signal
from amaranth.lib.wiring import connect

from ..noc.framing import offer_message
from ..noc.gate import Verdict
from ..noc.header import Fbits
from ..noc.merger import MessageMerger
from ..noc.message_buffer import MessageBuffer
from ..noc.rewrite import HeaderRewriter
from ..stream.token_bucket import Rate, TokenBucket
from ..tile import Receive, Send, Tile, TileEnv
from .sources import head_field, head_gate, match_source
from .tx_credit import CREDIT_FORMAT, CreditMsgType
from ..stream.counters import count


__all__ = ["CreditQueuesTile"]


class CreditQueuesTile(Tile):
    """A queue of ``buffer_flits`` per source tile, merged round-robin to the next hop.

    A message is stored whole in its source's queue (its input is never stalled), then sent on
    when the queue's drain ``rate`` (a :class:`~apiary.stream.token_bucket.Rate` in flits, or
    ``None``: as fast as the next hop takes it) holds tokens for all its flits; a queue waiting
    for tokens never holds the output, so the others keep theirs. Each flit leaving queue *k*
    is a credit owed to source *k*, returned in ``TX_CREDIT`` messages (one at a time per
    source, carrying all owed so far).

    Latency: 3 cycles from a message's last flit in to its first out (store and forward; the
    merge adds none). Throughput: one flit per cycle.
    Drops, counted: ``no_credit`` (a message that found its queue full: its sender ignored
    its credits), ``unknown_source`` (from a tile not in ``sources``). Counters ``q<k>_peak``:
    the most flits queue *k* ever held (at most ``buffer_flits``).

    Parameters
    ----------
    sources : sequence of (x, y)
        The sending tiles, one queue each.
    buffer_flits : int
        Each queue's size in flits (a power of two); the sources' ``credits``.
    max_flits : int
        Longest message (default ``buffer_flits``).
    rates : sequence of Rate or None
        Each queue's drain rate in flits (default: none limited).
    credit_batch : int
        Flits owed to a source before a ``TX_CREDIT`` goes back (default ``buffer_flits // 4``;
        sooner when its queue is empty).

    Sizing: a sender keeps its queue busy only if its credits cover the credit loop, the
    flits its queue drains while a credit travels back and the next message arrives
    (``buffer_flits >= rate * loop + credit_batch``, the bandwidth-delay product of
    :mod:`apiary.stream.sizing` in flits and cycles).

    Message ports: ``messages`` in, any type, as flits (``raw``); out, merged round-robin a
    message at a time, ``forwarded`` (the queued messages, any type, as flits) and
    ``tx_credit`` (``TX_CREDIT``, framed).
    """

    streaming = False       # never holds its input waiting for its output
    inputs = (Receive("messages", raw=True),)
    outputs = (Send("forwarded", raw=True),
               Send("tx_credit", CreditMsgType.TX_CREDIT, meta=CREDIT_FORMAT))

    def __init__(self, env: TileEnv | None = None, *, sources: Sequence[tuple[int, int]],
                 buffer_flits: int = 64, max_flits: int | None = None,
                 rates: Sequence[Rate | None] | None = None,
                 credit_batch: int | None = None) -> None:
        env = env if env is not None else TileEnv()
        self.sources = [cast(tuple[int, int], tuple(s)) for s in sources]
        if not self.sources or len(set(self.sources)) != len(self.sources):
            raise ValueError(f"CreditQueuesTile needs distinct (x, y) sources, not {sources!r}")
        self.rates = list(rates) if rates is not None else [None] * len(self.sources)
        if len(self.rates) != len(self.sources):
            raise ValueError(f"CreditQueuesTile has {len(self.sources)} sources but "
                             f"{len(self.rates)} rates")
        for rate in self.rates:
            if rate is not None and not isinstance(rate, Rate):
                raise ValueError(f"CreditQueuesTile rates must be Rates or None, not {rate!r}")
        hops = env.next_hops("data").get(None, [])
        if len(hops) != 1:
            raise ValueError(f"CreditQueuesTile {env.name!r} needs exactly one next hop (a route "
                             f"with key None), not {len(hops)}")
        self.next_hop = hops[0]
        self.buffers = [MessageBuffer(env.width, buffer_flits=buffer_flits,
                                      max_flits=buffer_flits if max_flits is None else max_flits,
                                      always_ready=True) for _ in self.sources]
        for rate in self.rates:
            if rate is not None and rate.burst < self.buffers[0].max_flits:
                raise ValueError(f"a drain rate's burst ({rate.burst}) must hold the longest "
                                 f"message ({self.buffers[0].max_flits} flits)")
        self.credit_batch = (max(1, self.buffers[0].buffer_flits // 4) if credit_batch is None
                             else credit_batch)
        if (not isinstance(self.credit_batch, int) or isinstance(self.credit_batch, bool)
                or not 1 <= self.credit_batch <= self.buffers[0].buffer_flits):
            raise ValueError(f"CreditQueuesTile credit_batch must be 1 to buffer_flits, not "
                             f"{credit_batch!r}")
        counters: dict[str, Any] = {
            "no_credit": "messages dropped: their queue was full (sent without credits)",
            "unknown_source": "messages dropped: from a tile that has no queue here",
            "forwarded": "messages sent on to the next hop",
        }
        for k in range(len(self.sources)):
            counters[f"q{k}_peak"] = (16, f"most flits queue {k} held at once")
        super().__init__(env, counters=counters)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        w, n = self.env.width, len(self.sources)
        c = self.counters

        ports = self.message_ports(m)

        # -- in: choose the queue by source --------------------------------------------------
        gate = head_gate(m, w)
        connect(m, router=ports.messages, gate=gate.i)
        found, queue = match_source(m, w, gate.head, self.sources)
        m.d.comb += gate.verdict.eq(Mux(found, Verdict.PASS, Verdict.DROP))
        held = Signal(range(n))
        with m.If(gate.accept):
            m.d.sync += held.eq(queue)
            with m.If(~found):
                count(m, c.unknown_source)
        route = Mux(gate.accept, queue, held)

        # -- the queues, each drained at its rate, merged -------------------------------------
        merge = m.submodules.queue_merge = MessageMerger(w, n)
        owed_add = []
        dropped = []
        # The queues never stall (always_ready: a message without room is dropped), so the gate
        # is always ready; its ready must not depend on the route, which depends on its accept.
        m.d.comb += gate.o.ready.eq(1)
        for k, buf in enumerate(self.buffers):
            m.submodules[f"q{k}"] = buf
            m.d.comb += [buf.i.payload.eq(gate.o.payload),
                         buf.i.valid.eq(gate.o.valid & (route == k))]
            dropped.append(buf.dropped)
            peak = getattr(c, f"q{k}_peak")
            with m.If(buf.occupancy > peak):
                m.d.sync += peak.eq(buf.occupancy)
            out = merge.i[k]
            starting = Signal(name=f"q{k}_starting", init=1)    # buf.o shows a first flit
            ok = Signal(name=f"q{k}_ok", init=1)
            rate = self.rates[k]
            if rate is not None:
                bucket = m.submodules[f"q{k}_rate"] = TokenBucket(rate)
                m.d.comb += [bucket.cost.eq(head_field(w, buf.o.payload.data, "msg_len") + 1),
                             bucket.take.eq(buf.o.valid & out.ready & starting),
                             ok.eq(~starting | bucket.ok)]
            m.d.comb += [out.payload.eq(buf.o.payload), out.valid.eq(buf.o.valid & ok),
                         buf.o.ready.eq(out.ready & ok)]
            moved = Signal(name=f"q{k}_moved")
            m.d.comb += moved.eq(buf.o.valid & buf.o.ready)
            with m.If(moved):
                m.d.sync += starting.eq(buf.o.payload.last)
            owed_add.append(moved)
        count(m, c.no_credit, sum(dropped))

        hop = self.next_hop
        m.submodules.rewrite = rewrite = HeaderRewriter(w, {
            "dst_x": hop.x, "dst_y": hop.y, "dst_fbits": hop.fbits,
            "src_x": self.env.x, "src_y": self.env.y})
        connect(m, merge=merge.o, rewrite=rewrite.i)

        # -- credits back -----------------------------------------------------------------------
        tx = ports.tx_credit
        owed = [Signal(16, name=f"owed{k}") for k in range(n)]
        turn = Signal(range(n))
        xs = Signal(8)
        ys = Signal(8)
        for k, (x, y) in enumerate(self.sources):
            with m.If(turn == k):
                m.d.comb += [xs.eq(x), ys.eq(y)]
        # Credits go back in batches of ``credit_batch`` flits (or whatever is owed once the
        # queue is empty), so that credit messages take a small share of the output link.
        current, due = Signal(16), Signal()
        for k in range(n):
            with m.If(turn == k):
                m.d.comb += [current.eq(owed[k]),
                             due.eq((owed[k] >= self.credit_batch)
                                    | ((owed[k] != 0) & (self.buffers[k].occupancy == 0)))]
        # One TX_CREDIT at a time: its amount and destination are latched (and taken off what
        # is owed) when it starts, so the descriptor holds still until the sender takes it.
        busy = Signal()
        amount, dst_x, dst_y = Signal(16), Signal(8), Signal(8)
        taken = offer_message(m, tx, busy, dst=(dst_x, dst_y, Fbits.LOCAL0),
                              src=(self.env.x, self.env.y, Fbits.LOCAL0),
                              msg_type=CreditMsgType.TX_CREDIT.value, meta=amount)
        start = Signal()
        m.d.comb += start.eq(~busy & due)
        with m.If(busy & taken):
            m.d.sync += busy.eq(0)
        with m.If(~busy):
            m.d.sync += turn.eq(Mux(turn == n - 1, 0, turn + 1))
        with m.If(start):
            m.d.sync += [busy.eq(1), amount.eq(current), dst_x.eq(xs), dst_y.eq(ys)]
        for k in range(n):
            m.d.sync += owed[k].eq(owed[k] + owed_add[k] - Mux(start & (turn == k), current, 0))

        connect(m, rewrite=rewrite.o, merge=ports.forwarded)
        m.d.comb += tx.i_data.valid.eq(0)
        with m.If(rewrite.o.valid & rewrite.o.ready & rewrite.o.payload.last):
            count(m, c.forwarded)
        return m
