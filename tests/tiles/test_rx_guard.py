"""The no-backpressure receive contract: a stalled tile behind an RxGuardTile drops only its own
messages (counted) and the tile beside it keeps its rate; without the guard it blocks both."""

import pytest

from apiary.design import Design
from apiary.noc import Message, NocHeader
from apiary.stream.testbench import simulate
from apiary.tiles import PortTile, RxGuardTile
from apiary.top import DesignTop
from flit_drivers import collect_messages, put_message

N = 40              # messages, alternately to the stalled tile and to the running one
PAYLOAD = 16        # bytes: 2 header + 2 payload flits at 64 bits


def guarded_design(guard: bool, width: int, buffer_flits: int = 16) -> Design:
    """``svc`` sends along row 0; its path to ``fast`` crosses ``slow``'s router."""
    d = Design("rx_guard", cols=3, rows=1, width=width)
    d.add("svc", PortTile, at=(0, 0))
    if guard:
        d.add("slow", RxGuardTile, at=(1, 0), tile=PortTile, buffer_flits=buffer_flits)
    else:
        d.add("slow", PortTile, at=(1, 0))
    d.add("fast", PortTile, at=(2, 0))
    d.route("svc", "slow")
    d.route("svc", "fast")
    return d


def run(guard: bool, slow_reads: bool, width: int = 64, cycles: int = 400):
    top = DesignTop(guarded_design(guard, width))
    fast_times: list[int] = []
    got: dict[str, list] = {"fast": [], "slow": []}
    counters = {}

    async def source(ctx):
        for k in range(N):
            dst = (1, 0) if k % 2 == 0 else (2, 0)
            await put_message(ctx, top.svc_tx, Message(
                NocHeader(dst_x=dst[0], dst_y=dst[1], msg_type=k + 1),
                payload=bytes([k]) * PAYLOAD), width)

    async def fast(ctx):
        await collect_messages(ctx, top.fast_rx, width, got["fast"], times=fast_times)

    async def slow(ctx):
        await collect_messages(ctx, top.slow_rx, width, got["slow"], ready=lambda _: slow_reads)

    async def main(ctx):
        await ctx.tick().repeat(cycles)
        if guard:
            counters["dropped"] = ctx.get(top.counters.slow_rx_guard_dropped)
            counters["passed"] = ctx.get(top.counters.slow_rx_guard_passed)

    simulate(top, main, background=[source, fast, slow])
    return got, fast_times, counters


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("guard", [True, False], ids=["guarded", "unguarded"])
def test_stalled_tile(guard, width):
    got, fast_times, counters = run(guard, slow_reads=False, width=width)
    expect_fast = [k + 1 for k in range(1, N, 2)]
    if not guard:
        # The stalled tile holds the shared link: the running tile gets almost nothing.
        assert len(got["fast"]) < 4
        return
    # Every message to the running tile arrives, in order, intact ...
    assert [m.header.msg_type for m in got["fast"]] == expect_fast
    assert all(m.payload == bytes([m.header.msg_type - 1]) * PAYLOAD for m in got["fast"])
    # ... at the rate it has when the other tile reads everything.
    _, baseline_times, _ = run(True, slow_reads=True, width=width)
    assert fast_times[-1] <= baseline_times[-1] + 4
    # The stalled tile's messages: as many as fit its 16-flit buffer are kept (4 of 4 flits at
    # 64 bits, 8 of 2 at 512), the others dropped, counted.
    kept = 16 // len(Message(NocHeader(), payload=bytes(PAYLOAD)).flits(width))
    assert counters == {"passed": kept, "dropped": N // 2 - kept}


def test_running_tile_behind_the_guard_gets_everything():
    got, _, _ = run(True, slow_reads=True)
    assert [m.header.msg_type for m in got["slow"]] == [k + 1 for k in range(0, N, 2)]
    assert len(got["fast"]) == N // 2


def test_rx_guard_errors():
    with pytest.raises(ValueError, match="tile= must be a Tile class"):
        RxGuardTile(tile=int)
    with pytest.raises(ValueError, match="must hold the longest message"):
        RxGuardTile(tile=PortTile, buffer_flits=8, max_flits=16)
