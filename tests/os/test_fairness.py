"""Fairness counters (apiary/noc/meter.py, MonitorConfig(fairness=True)) and Coyote's MAD metric
(apiary/bench/fairness.py): three identical untrusted tiles, one hop from one shared memory tile
on three sides of its router, store to it as fast as they can (Amaranth's simulator, 64 bits).
Over a window in which all three are backlogged, the bytes each got through differ from their
mean by a MAD below MAD_BOUND; rate-limiting one tile (starving it) drives the MAD far above.
The meter alone counts flits, messages, bytes and stalls exactly.

    (0,0) mm      (1,0) app_n   (2,0) errors
    (0,1) app_w   (1,1) mem0
                  (1,2) app_s

(A fourth tile east of the memory makes the layout check find a deadlock cycle through the
memory manager and the memory tile, both streaming, for every place of the manager and the
error manager on a 4 × 3 mesh, so the test shares the memory three ways.)
"""

import random

import pytest

from apiary.bench.fairness import fairness, mean_absolute_deviation
from apiary.design import Design
from apiary.noc.header import Message, NocHeader
from apiary.noc.meter import FlitMeter
from apiary.os.kernel import Kernel
from apiary.os.memory_tile import STORE_MEM, mem_message_flits
from apiary.os.monitor import MonitorConfig, RateLimit
from apiary.os.tlb import TlbConfig
from apiary.sim import open_sim
from apiary.stream.testbench import simulate
from apiary.tiles import RawPortTile
from apiary.tiles.raw_port import message_frame

WIDTH = 64
APPS = {"app_n": (1, 0), "app_w": (0, 1), "app_s": (1, 2)}
MAD_BOUND = 0.05            # Coyote: "the MAD is very low compared with total bandwidth"
WINDOW = 900                # cycles, all three backlogged throughout
STORES = 32                 # each tile's backlog, more than it can send in the window
PAYLOAD = 64


def shared_memory_design(starve: str | None = None, router_meters: bool = False) -> Design:
    d = Design("fair", cols=3, rows=3, width=WIDTH)
    if router_meters:
        d.settings["router_meters"] = True
    kernel = Kernel(d, manager=(0, 0), errors=(2, 0), memories={"mem0": ((1, 1), 1 << 15)},
                    monitor=MonitorConfig(tlbs=(TlbConfig(sets=1, ways=1),), fairness=True))
    for name, at in APPS.items():
        d.add(name, RawPortTile, at=at, trusted=False)
        kernel.map_pages(name, 4096)
    if starve:
        kernel.limit(starve, RateLimit(burst=16, refill=1, period=8))
    return d


def run_window(design: Design) -> dict:
    with open_sim(design, "pysim") as sim:
        for name, at in APPS.items():
            for k in range(STORES):
                flits = mem_message_flits(WIDTH, STORE_MEM, (k % 32) * PAYLOAD, PAYLOAD,
                                          bytes([k]) * PAYLOAD, src=at, dst=(7, 7))
                sim.send(message_frame(flits, WIDTH), port=name)
        sim.run(WINDOW)
        return sim.counters()


def test_tiles_sharing_a_memory_get_fair_shares_and_a_starved_one_shows():
    counters = run_window(shared_memory_design(router_meters=True))
    fair = fairness(counters, list(APPS))
    # every tile got through a good many stores, none all it offered (backlogged throughout)
    assert all(8 * PAYLOAD <= v < STORES * PAYLOAD for v in fair.per_tile.values()), fair
    assert fair.mad < MAD_BOUND, fair
    # flits agree with bytes: each store is the same number of flits
    assert fairness(counters, list(APPS), "out_flits").mad < MAD_BOUND
    # the routers' meters: a monitor's side of its router's local port is that port
    for name, (x, y) in APPS.items():
        for what in ("flits", "bytes", "stalls", "messages"):
            assert counters[f"data_r{x}_{y}_p_in_{what}"] == \
                counters[f"{name}_monitor_out_{what}"]
    # ... and the memory's router took the same share from each of its three inputs (a store
    # at most still between the two)
    into_memory = [counters[f"data_r1_1_{port}_in_bytes"] for port in "nws"]
    assert mean_absolute_deviation(into_memory) < MAD_BOUND
    for port, name in zip("nws", APPS):
        assert 0 <= fair.per_tile[name] - counters[f"data_r1_1_{port}_in_bytes"] <= PAYLOAD
    assert counters["data_r1_1_e_in_flits"] == 0            # nothing east of it
    starved_counters = run_window(shared_memory_design(starve="app_s"))
    starved = fairness(starved_counters, list(APPS))
    assert starved.per_tile["app_s"] < fair.per_tile["app_s"] / 2, starved
    assert starved.mad > 4 * MAD_BOUND, starved
    # the starved tile waited more than when it was not
    waits = "app_s_monitor_tile_waits"
    assert starved_counters[waits] > counters[waits]
    print(f"MAD fair {fair.mad:.3f} {fair.per_tile}; one starved {starved.mad:.3f} "
          f"{starved.per_tile}")


def test_mad_helper():
    assert mean_absolute_deviation([5, 5, 5, 5]) == 0
    assert mean_absolute_deviation([1, 3]) == 0.5
    assert mean_absolute_deviation([0, 0, 0, 4]) == 1.5
    with pytest.raises(ValueError, match="positive mean"):
        mean_absolute_deviation([0, 0])
    with pytest.raises(ValueError, match="no values"):
        mean_absolute_deviation([])
    with pytest.raises(ValueError, match="fairness=True"):
        fairness({"a_monitor_faults": 0}, ["a"])


@pytest.mark.parametrize("width", [64, 512])
def test_meter_counts_flits_messages_bytes_and_stalls(width):
    """Random messages with random payloads through a meter, the sink stalling at random: the
    counters equal what was sent and the cycles the sink refused a flit."""
    rng = random.Random(width)
    messages = []
    for _ in range(12):
        hdr = NocHeader(dst_x=1, dst_y=2, msg_type=12)
        messages.append(Message(hdr, [], bytes(rng.randrange(0, 200))).flits(width))
    dut = FlitMeter(width)
    seen = {}
    refused = [0]

    async def tb(ctx):
        for flits in messages:
            for data, last in flits:
                ctx.set(dut.data, data)
                ctx.set(dut.last, last)
                ctx.set(dut.valid, 1)
                while True:
                    ready = rng.random() < 0.6
                    ctx.set(dut.ready, ready)
                    await ctx.tick()
                    if ready:
                        break
                    refused[0] += 1
        ctx.set(dut.valid, 0)
        await ctx.tick()
        seen.update({name: ctx.get(getattr(dut.counters, name))
                     for name in ("flits", "messages", "bytes", "stalls")})

    simulate(dut, tb, timeout=10_000)
    assert seen["flits"] == sum(len(f) for f in messages)
    assert seen["messages"] == len(messages)
    assert seen["bytes"] == sum(Message.from_flits(f, width).header.payload_bytes
                                for f in messages)
    assert seen["stalls"] == refused[0] > 0


def test_router_meters_are_opt_in():
    from apiary.top import DesignTop
    import re
    per_router = re.compile(r"data_r\d+_\d+_")
    plain = DesignTop(shared_memory_design()).bank
    metered = DesignTop(shared_memory_design(router_meters=True)).bank
    assert not [n for n in plain.names if per_router.match(n)]
    assert "data_r1_1_n_in_bytes" in metered.names
    assert len([n for n in metered.names if per_router.match(n)]) == 9 * 5 * 4


def test_fairness_counters_are_opt_in():
    from apiary.os.monitor import Monitor
    from apiary.tile import TileEnv
    env = TileEnv(width=WIDTH, x=1, y=1)
    default = Monitor(env).signature.members["counters"].signature.members
    metered = Monitor(env, MonitorConfig(fairness=True)).signature.members["counters"]
    assert "out_bytes" not in default and "tile_waits" not in default
    assert {"out_bytes", "out_flits", "out_stalls", "in_bytes", "in_flits", "in_stalls",
            "tile_waits"} <= set(metered.signature.members)
    with pytest.raises(ValueError, match="fairness must be True or False"):
        MonitorConfig(fairness=1)


def test_the_example_of_docs_coyote_md_runs_and_prints_its_mad(capsys):
    import re
    from pathlib import Path
    guide = Path(__file__).parents[2] / "docs" / "coyote.md"
    code = re.search(r"```python\n(.*?)```", guide.read_text(), re.S).group(1)
    exec(compile(code, str(guide), "exec"), {})
    assert capsys.readouterr().out.startswith("0.0208")
