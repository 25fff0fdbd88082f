"""Link impairment (apiary/sim/impair.py): seeded loss, duplication and reordering per direction,
on its own, in the simulation harness (the UDP echo stack on Amaranth's simulator) and in the
TAP bridge (a fake TAP device, no root), with simulated time that runs while the bridge waits."""

import math
import pathlib
import random
import time
from collections import Counter

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design, load_script
from apiary.sim import Impairment, SimError, open_sim
from apiary.sim.tap import DEFAULT_IDLE_HZ, TapBridge
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_example(name):
    return load_script(ROOT / "examples" / f"{name}.py")


loopback = load_example("frame_loopback")


def through(impairment, frames, name="to_design"):
    """``frames`` through a fresh direction ``name`` of ``impairment``, flushed;
    returns ``(out, direction)``."""
    direction = impairment.direction(name)
    return direction.apply(frames) + direction.flush(), direction


# -- the model on its own ---------------------------------------------------------------------

def test_same_seed_same_pattern_and_independent_directions():
    frames = list(range(2000))
    imp = Impairment(loss=0.1, reorder=0.1, duplicate=0.1, seed=5)
    out, _ = through(imp, frames)
    assert through(Impairment(loss=0.1, reorder=0.1, duplicate=0.1, seed=5), frames)[0] == out
    assert through(Impairment(loss=0.1, reorder=0.1, duplicate=0.1, seed=6), frames)[0] != out
    assert through(imp, frames, "from_design")[0] != out     # each direction has its own RNG
    # Fed in pieces, a direction gives what it gives fed at once (a held frame waits for the
    # next piece).
    direction = imp.direction("to_design")
    pieces = [direction.apply(frames[k:k + 7]) for k in range(0, len(frames), 7)]
    assert sum(pieces, []) + direction.flush() == out


def test_the_draws_are_as_documented():
    """Three draws per frame from Random(f"{seed}:{direction}"): loss, duplicate, reorder."""
    draws = random.Random("11:from_design")
    expected, held = [], []
    for frame in range(300):
        lose, twice, hold = (draws.random() < p for p in (0.3, 0.3, 0.4))
        if lose:
            continue
        copies = [frame] * (2 if twice else 1)
        if held:
            expected += copies + held
            held = []
        elif hold:
            held = copies
        else:
            expected += copies
    out, _ = through(Impairment(loss=0.3, duplicate=0.3, reorder=0.4, seed=11),
                     list(range(300)), "from_design")
    assert out == expected + held


def test_rates_over_20000_frames():
    """Each rate within 0.01 of what it should be (3 to 6 standard deviations at n = 20,000);
    a swap can only start when no frame is held, so reorder=r swaps r/(1+r) of the frames."""
    n, loss, duplicate, reorder = 20_000, 0.05, 0.1, 0.2
    _, d = through(Impairment(loss=loss, duplicate=duplicate, reorder=reorder, seed=1),
                   list(range(n)))
    kept = n - d.lost
    assert d.frames == n
    assert math.isclose(d.lost / n, loss, abs_tol=0.01)
    assert math.isclose(d.duplicated / kept, duplicate, abs_tol=0.01)
    assert math.isclose(d.reordered / kept, reorder / (1 + reorder), abs_tol=0.01)


def test_counts_add_up():
    frames = [bytes([i % 256, i // 256]) for i in range(5000)]
    out, d = through(Impairment(loss=0.2, reorder=0.3, duplicate=0.25, seed=9), frames)
    assert d.frames == len(frames) == len(out) - d.duplicated + d.lost
    copies = Counter(out)
    assert set(copies) <= set(frames) and set(copies.values()) <= {1, 2}
    assert sum(1 for f in frames if f not in copies) == d.lost
    assert sum(1 for c in copies.values() if c == 2) == d.duplicated
    # Frames only ever move by one place: each output is at most one frame out of order.
    index = {f: i for i, f in enumerate(frames)}
    order = [index[f] for f in dict.fromkeys(out)]
    assert sum(1 for a, b in zip(order, order[1:]) if a > b) == d.reordered > 0


def test_reorder_swaps_neighbours_and_flush_releases_the_held_frame():
    d = Impairment(reorder=1.0).direction("to_design")
    assert d.apply([1, 2, 3, 4, 5]) == [2, 1, 4, 3]
    assert d.held == 1 and d.reordered == 2
    assert d.apply([6]) == [6, 5]               # held across calls until a successor comes
    assert d.apply([7]) == [] and d.flush() == [7] and d.held == 0
    assert d.flush() == [] and d.reordered == 3
    both = Impairment(reorder=1.0, duplicate=1.0).direction("from_design")
    assert both.apply(["a", "b"]) == ["b", "b", "a", "a"]
    assert through(Impairment(loss=1.0, reorder=1.0), [1, 2, 3])[0] == []


def test_no_impairment_is_false_and_summaries_read():
    assert not Impairment() and not Impairment.none()
    assert Impairment(duplicate=0.01) and Impairment(loss=1, seed=0)
    link = Impairment(loss=1.0, directions="from_design", seed=3).link()
    assert link.to_design.apply([b"a", b"b"]) == [b"a", b"b"]   # the other direction: untouched
    assert link.from_design.apply([b"a"]) == []
    assert link.summary() == ("to design: 2 frames, 0 lost, 0 reordered, 0 duplicated; "
                              "from design: 1 frames, 1 lost, 0 reordered, 0 duplicated")
    assert link.counts()["from_design"] == {"frames": 1, "lost": 1, "reordered": 0,
                                            "duplicated": 0}
    assert str(Impairment(loss=0.05, reorder=0.02, seed=7)) == \
        "loss 0.05, reorder 0.02, duplicate 0, seed 7"


def test_frames_dropped_by_number_whatever_the_draws():
    imp = Impairment(drop_from_design=[5, 2, 2], drop_to_design=1)
    assert imp and imp.drop_from_design == (2, 5) and imp.drop_to_design == (1,)
    assert str(imp) == ("loss 0, reorder 0, duplicate 0, seed 1; losing frames 1 to design; "
                        "losing frames 2, 5 from design")
    link = imp.link()
    assert link.from_design.apply([1, 2, 3]) + link.from_design.apply([4, 5, 6]) == [1, 3, 4, 6]
    assert link.to_design.apply(["a", "b"]) == ["b"]
    assert link.counts()["from_design"]["lost"] == 2 and link.to_design.lost == 1
    # The numbered losses come on top of the probabilities, and leave the draws as they were:
    # the same seed loses the same other frames.
    frames = list(range(1, 501))
    plain, _ = through(Impairment(loss=0.1, duplicate=0.1, seed=4), frames)
    picked, _ = through(Impairment(loss=0.1, duplicate=0.1, seed=4, drop_to_design=(7, 300)),
                        frames)
    assert picked == [f for f in plain if f not in (7, 300)] and 300 in plain
    # A direction the probabilities leave alone still loses its numbered frames.
    one = Impairment(loss=1.0, directions="to_design", drop_from_design=(2,)).link()
    assert one.from_design.apply([1, 2, 3]) == [1, 3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(loss=1.5), "loss must be a probability from 0 to 1, not 1.5"),
    (dict(reorder=-0.1), "reorder must be a probability from 0 to 1, not -0.1"),
    (dict(duplicate="half"), "duplicate must be a probability from 0 to 1, not 'half'"),
    (dict(loss=float("nan")), "loss must be a probability from 0 to 1, not nan"),
    (dict(loss=True), "loss must be a probability from 0 to 1, not True"),
    (dict(seed="7"), "the impairment's seed must be an integer, not '7'"),
    (dict(directions=("sideways",)), "impairment directions must be among to_design, "
                                     "from_design, not ('sideways',)"),
    (dict(drop_to_design=(0,)), "drop_to_design lists frame numbers, each 1 or more, not (0,)"),
    (dict(drop_from_design="3"), "drop_from_design lists frame numbers, each 1 or more, "
                                 "not '3'"),
    (dict(drop_from_design=[True]), "drop_from_design lists frame numbers, each 1 or more, "
                                    "not [True]"),
])
def test_bad_arguments_are_one_readable_error(kwargs, message):
    with pytest.raises(SimError) as e:
        Impairment(**kwargs)
    assert str(e.value) == message
    with pytest.raises(SimError, match="a link direction is one of to_design, from_design"):
        Impairment().direction("upstream")


# -- in the harness: the UDP echo stack ---------------------------------------------------------

MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"


def echo_requests(n):
    return [bytes(Ether(dst=MAC, src="52:54:00:12:34:56") / IP(src="10.0.0.1", dst=IPV4)
                  / UDP(sport=40000 + i, dport=7) / (bytes([i]) * (8 + i))) for i in range(n)]


def echo(impair, requests):
    """Send ``requests`` to the UDP echo stack (64 bits, pysim) through ``impair``; returns
    ``(received, sent, counters, link)``."""
    design = load_design(str(ROOT / "examples" / "udp_echo.py"), width=64)
    with open_sim(design, "pysim", idle_cycles=200, impair=impair) as sim:
        sim.send_many(requests)
        sim.run()
        return sim.received(), sim.sent(), sim.counters(), sim.link()


def test_echo_replies_lost_on_the_way_back():
    requests = echo_requests(4)
    received, sent, counters, link = echo(
        Impairment(loss=1.0, directions="from_design"), requests)
    assert received == []
    assert [f.data for f in sent] == requests and counters["eth_tx_forwarded"] == 4
    assert link.counts() == {"to_design": {"frames": 4, "lost": 0, "reordered": 0,
                                           "duplicated": 0},
                             "from_design": {"frames": 4, "lost": 4, "reordered": 0,
                                             "duplicated": 0}}


def test_duplicated_requests_are_each_echoed_twice():
    requests = echo_requests(4)
    received, sent, _, link = echo(Impairment(duplicate=1.0, directions="to_design"), requests)
    assert [f.data for f in sent] == [r for r in requests for _ in range(2)]
    assert [f.data for f in received] == [echo_reply(r)[0] for r in requests for _ in range(2)]
    assert link.to_design.duplicated == 4 and link.from_design.frames == 8


def test_reordered_replies_swap_and_the_last_is_released_when_the_run_ends():
    requests = echo_requests(5)
    received, _, _, link = echo(Impairment(reorder=1.0, directions="from_design"), requests)
    replies = [echo_reply(r)[0] for r in requests]
    assert [f.data for f in received] == [replies[i] for i in (1, 0, 3, 2, 4)]
    # The design's frames are untouched: in cycle order they are the replies in order.
    assert [f.data for f in sorted(received, key=lambda f: f.cycle_first)] == replies
    assert link.from_design.reordered == 2 and link.from_design.held == 0


# -- in the harness: the frame loopback ---------------------------------------------------------

def frames(n, size=60):
    return [bytes([i]) * size for i in range(n)]


@pytest.mark.parametrize("backend", ["pysim", "verilator"])   # both, through the shared Sim
def test_a_held_frame_enters_when_the_run_starts(backend):
    with open_sim(loopback.design(64), backend, idle_cycles=100,
                  impair=Impairment(reorder=1.0, directions="to_design")) as sim:
        sim.send_many(frames(3))
        assert sim.pending() == 3               # two queued, one held by the link
        sim.run()
        assert [f.data[0] for f in sim.sent()] == [1, 0, 2]
        assert [f.data[0] for f in sim.received()] == [1, 0, 2]
        assert sim.pending() == 0 and sim.link().to_design.reordered == 1


def test_no_impairment_changes_nothing():
    results = []
    for impair in (None, Impairment(), Impairment(loss=1.0, directions="from_design")):
        with open_sim(loopback.design(64), "pysim", idle_cycles=100, stall=0.3, seed=4,
                      impair=impair) as sim:
            sim.send_many(frames(6, 100))
            cycles = sim.run()
            results.append((cycles, sim.sent(), sim.received(), sim.link(), sim.impairment))
    (cycles, sent, received, link, impairment), zero, lossy = results
    assert link is None and impairment is None and received and len(sent) == 6
    assert zero == results[0]                     # an all-zero impairment is no impairment
    assert lossy[:2] == (cycles, sent) and lossy[2] == []   # same cycles in, nothing out


# -- in the TAP bridge ----------------------------------------------------------------------------

class FakeTap:
    """A TAP device in memory: ``inbox`` holds what the kernel sends, ``written`` what the
    design sent; ``wait`` sleeps as a real one with nothing to read would, and logs how long."""
    name = "fake0"

    def __init__(self, inbox=()):
        self.inbox = list(inbox)
        self.written = []
        self.waits = []

    def read_frames(self, limit=256):
        frames, self.inbox = self.inbox[:limit], self.inbox[limit:]
        return frames

    def write_frame(self, frame):
        self.written.append(frame)
        return True

    def wait(self, timeout):
        start = time.monotonic()
        time.sleep(timeout)
        self.waits.append(time.monotonic() - start)


def bridged(impair=None, idle_hz=None, settings=None, log=lambda line: None, **kw):
    design = loopback.design(64)
    design.settings.update(settings or {})
    sim = open_sim(design, "pysim", idle_cycles=100)
    tap = FakeTap(frames(3))
    return sim, tap, TapBridge(sim, tap, impair=impair, idle_hz=idle_hz, log=log, **kw)


def settle(bridge):
    """Step until the design is idle (the bridge's next step would wait); return the cycle."""
    bridge.step()
    while not bridge.sim.idle:
        bridge.step()
    return bridge.sim.cycle


def test_bridge_impairs_both_directions():
    sim, tap, bridge = bridged(Impairment(duplicate=1.0))
    with sim:
        assert bridge.step() == 3 + 6
        assert tap.written == [f for f in frames(3) for _ in range(4)]   # twice in, twice out
        assert bridge.frames_in == 3 and bridge.frames_out == 12
        assert bridge.link.to_design.duplicated == 3 and bridge.link.from_design.frames == 6
        assert bridge.link.from_design.duplicated == 6


def test_bridge_releases_a_held_frame_on_the_next_quiet_step():
    sim, tap, bridge = bridged(Impairment(reorder=1.0, directions="to_design"))
    with sim:
        bridge.step()
        assert [f[0] for f in tap.written] == [1, 0] and bridge.link.to_design.held == 1
        bridge.step()                           # nothing read: the held frame goes in
        assert [f[0] for f in tap.written] == [1, 0, 2] and bridge.link.to_design.held == 0


def test_idle_time_advances_the_simulation():
    lines = []
    sim, tap, bridge = bridged(Impairment(loss=0.5, seed=2), idle_hz=2000, log=lines.append)
    with sim:
        start = settle(bridge)                  # the frames in and out
        bridge.run(duration=0.3)
        assert tap.waits, "the bridge never waited"
        expected = sum(round(w * 2000) for w in tap.waits)
        assert abs(sim.cycle - start - expected) <= len(tap.waits)   # rounding, per wait
        assert sim.cycle - start >= 100 * len(tap.waits)             # 0.05 s at 2000 Hz each
    assert "(pysim; while idle, simulated time runs at up to 2,000 cycles/s)" in lines[0]
    assert "impairing the link: loss 0.5" in lines[1]
    assert lines[-2] == "impaired: " + bridge.link.summary() and lines[-1].startswith("stopped:")
    assert lines[-2].startswith("impaired: to design: 3 frames, ")


def test_idle_time_is_capped_at_one_step_and_defaults_to_the_design_setting_or_the_back_ends():
    sim, tap, bridge = bridged(idle_hz=10**9, step_cycles=50)
    with sim:
        start = settle(bridge)
        bridge.run(duration=0.2)
        assert sim.cycle - start == 50 * len(tap.waits) > 0
    sim, tap, bridge = bridged(settings={"idle_hz": 500})
    with sim:
        assert bridge.idle_hz == 500
    sim, tap, bridge = bridged()
    with sim:                                   # neither says: the back end's default
        assert bridge.idle_hz == DEFAULT_IDLE_HZ["pysim"] > 0
        start = settle(bridge)
        bridge.run(duration=0.15)
        assert sim.cycle - start == sum(round(w * bridge.idle_hz) for w in tap.waits) > 0
    lines = []
    sim, tap, bridge = bridged(idle_hz=0, log=lines.append)
    with sim:
        start = settle(bridge)
        bridge.run(duration=0.15)
        assert sim.cycle == start and tap.waits    # 0: time stands still
        assert "time stands still while it is idle (idle_hz 0)" in lines[0]
        with pytest.raises(SimError, match="idle_hz must be a number of cycles per second"):
            TapBridge(sim, tap, idle_hz=-1)
        with pytest.raises(SimError, match="impair must be an apiary.sim.Impairment"):
            TapBridge(sim, tap, impair=0.5)
