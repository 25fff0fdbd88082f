"""Per-queue transmit credits: two tiles send through one CreditQueuesTile whose queues drain at
different rates; the slow queue never blocks the fast one, no queue ever holds more than its
bound, and a tile that ignores its credits loses only its own messages (counted)."""

import pytest

from apiary.design import Design
from apiary.noc import Message, NocHeader
from apiary.stream.testbench import simulate
from apiary.stream.token_bucket import Rate
from apiary.tiles import CreditQueuesTile, PortTile, TxCreditTile
from apiary.top import DesignTop

from flit_drivers import collect_messages, put_message

SLOW = Rate(burst=8, refill=1, period=8)       # queue 0 drains 1 flit in 8 cycles
BUFFER = 64                                     # flits per queue: each sender's credits
CYCLES = 800
FLITS = {64: 6, 512: 2}                         # flits of a message with 25 payload bytes


def credit_design(width: int, credited: bool) -> Design:
    """Senders ``slow`` (1, 1) and ``fast`` (2, 1) → ``svc`` (1, 0) → ``sink`` (2, 0)."""
    d = Design("credits", cols=3, rows=2, width=width)
    svc = (1, 0)
    for name, at in (("slow", (1, 1)), ("fast", (2, 1))):
        if credited:
            d.add(name, TxCreditTile, at=at, tile=PortTile, route=True, service=svc,
                  credits=BUFFER)
        else:
            d.add(name, PortTile, at=at, route=True)
        d.route(name, "svc")
        d.route("svc", name, key="credit")
    d.add("svc", CreditQueuesTile, at=svc, sources=[(1, 1), (2, 1)], buffer_flits=BUFFER,
          max_flits=8, rates=[SLOW, None])
    d.add("sink", PortTile, at=(2, 0))
    d.route("svc", "sink")
    return d


def run(width: int, credited: bool):
    top = DesignTop(credit_design(width, credited))
    got: list[tuple[int, int]] = []
    counts = {}
    payload = bytes(range(24))

    def sender(port, tag):
        async def tb(ctx):
            k = 0
            while True:
                if tag == 2:
                    offered.append(k)
                await put_message(ctx, port, Message(NocHeader(msg_type=tag),
                                                     payload=bytes([k % 256]) + payload), width)
                k += 1
        return tb

    received: list[Message] = []

    async def sink(ctx):
        await collect_messages(ctx, top.sink_rx, width, received)

    async def drain(ctx):            # unwrapped senders get the service's TX_CREDITs raw
        ctx.set(top.slow_rx.ready, 1)
        ctx.set(top.fast_rx.ready, 1)

    offered: list[int] = []

    async def main(ctx):
        await ctx.tick().repeat(CYCLES)
        counts["fast_offered"] = len(offered) * FLITS[width]
        got.extend((msg.header.msg_type, msg.payload[0]) for msg in received)
        for name in ("no_credit", "unknown_source", "forwarded", "q0_peak", "q1_peak"):
            counts[name] = ctx.get(getattr(top.counters, f"svc_{name}"))
        if credited:
            counts["waits"] = ctx.get(top.counters.slow_credit_waits)
            counts["fast_waits"] = ctx.get(top.counters.fast_credit_waits)

    background = [sender(top.slow_tx, 1), sender(top.fast_tx, 2), sink]
    simulate(top, main, background=background + ([] if credited else [drain]))
    return got, counts


@pytest.mark.parametrize("width", [64, 512])
def test_slow_queue_never_blocks_the_fast_one(width):
    got, counts = run(width, credited=True)
    flits = FLITS[width]
    slow = [k for tag, k in got if tag == 1]
    fast = [k for tag, k in got if tag == 2]
    # Each flow in order, nothing lost, nothing sent without credits.
    assert slow == [k % 256 for k in range(len(slow))]
    assert fast == [k % 256 for k in range(len(fast))]
    assert counts["no_credit"] == 0 and counts["unknown_source"] == 0
    # The slow queue drains at its rate (1 flit in 8 cycles, after a burst of 8) ...
    slow_expected = (CYCLES / 8 + 8) / flits
    assert abs(len(slow) - slow_expected) <= 3
    # ... and the fast one delivers everything its sender offered (all but what is in flight),
    # its sender seldom waiting for credits: the slow queue holds up nothing of it.
    assert len(fast) * flits >= counts["fast_offered"] - 2 * BUFFER
    assert len(fast) * flits >= 0.5 * CYCLES
    assert counts["fast_waits"] < CYCLES / 20
    # Neither queue ever held more than its bound; the slow sender waited for credits.
    assert 0 < counts["q0_peak"] <= BUFFER and 0 < counts["q1_peak"] <= BUFFER
    assert counts["waits"] > CYCLES / 2


def test_sender_without_credits_loses_only_its_own():
    """Unwrapped senders overrun the slow queue: its excess is dropped and counted, the fast
    queue still gets its rate."""
    got, counts = run(64, credited=False)
    fast = [k for tag, k in got if tag == 2]
    assert counts["no_credit"] > 0
    assert fast == [k % 256 for k in range(len(fast))]
    assert len(fast) * FLITS[64] >= counts["fast_offered"] - 2 * BUFFER
    assert counts["q0_peak"] <= BUFFER


def test_credit_errors():
    with pytest.raises(ValueError, match="service= must be an"):
        TxCreditTile(tile=PortTile, service=3, credits=4)
    with pytest.raises(ValueError, match="credits= must be"):
        TxCreditTile(tile=PortTile, service=(0, 0), credits=0)
    with pytest.raises(ValueError, match="exactly one next hop"):
        CreditQueuesTile(sources=[(0, 1)])


@pytest.mark.parametrize("width", [64, 512])
def test_tiles_convert_without_combinational_cycles(width):
    """The simulator tolerates a combinational loop that settles; synthesis does not. Every
    FlexDriver tile converts to RTLIL at both ends of the width range."""
    from amaranth.back import rtlil
    from apiary.tile import Endpoint, TileEnv
    from apiary.tiles import RxGuardTile, TenantShaperTile
    hop = {"data": {None: [Endpoint("next", 2, 0, 0b1000)]}}
    tiles = [
        CreditQueuesTile(TileEnv(width=width, routes=hop), sources=[(0, 1), (1, 1)],
                         buffer_flits=32, max_flits=8, rates=[SLOW, None]),
        TxCreditTile(TileEnv(width=width), tile=PortTile, service=(1, 0), credits=32),
        RxGuardTile(TileEnv(width=width), tile=PortTile, buffer_flits=32),
        TenantShaperTile(TileEnv(width=width, routes=hop), tenants={(0, 1): 0},
                         rates=[SLOW]),
    ]
    for tile in tiles:
        assert "module" in rtlil.convert(tile, name="top")
