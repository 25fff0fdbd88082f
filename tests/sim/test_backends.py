"""The same scapy traffic through examples/frame_loopback.py on both back ends: the same frames
on the same cycles, drops counted the same way, and the Verilator model cache."""

import os
import pathlib
import random
import shutil
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_script
from apiary.sim import open_sim, BuildError, SimError
from apiary.sim import verilator as vl
from apiary.sim.core import Xorshift32, seed_state

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_example(name):
    return load_script(ROOT / "examples" / f"{name}.py")


loopback = load_example("frame_loopback")


def udp_frames(n, seed=0):
    """``n`` Ether/IP/UDP frames of assorted sizes, including 60 and 1514 bytes."""
    rng = random.Random(seed)
    sizes = [60, 1514, 61, 64, 1513, 128, 255, 256, 257, 512, 1000, 1500]
    sizes += [rng.randrange(60, 1515) for _ in range(n - len(sizes))]
    rng.shuffle(sizes)
    frames = []
    for i, size in enumerate(sizes[:n]):
        payload = bytes(rng.getrandbits(8) for _ in range(size - 42))
        pkt = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
               / IP(src="10.0.0.1", dst="10.0.0.2", id=i) / UDP(sport=1000 + i, dport=7)
               / payload)
        frames.append(pkt)
    if n >= 12:
        assert {len(bytes(f)) for f in frames} >= {60, 1514}
    return frames


def run_traffic(backend, width, frames, *, seed, stall):
    with open_sim(loopback.design(width), backend, seed=seed, stall=stall) as sim:
        sim.send_many(frames)
        cycles = sim.run(max_cycles=100_000)
        return cycles, sim.sent(), sim.received(), sim.counters()


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_same_traffic_same_frames_and_cycles_on_both_backends(width):
    frames = udp_frames(30, seed=width)
    results = {b: run_traffic(b, width, frames, seed=7, stall=0.25)
               for b in ("pysim", "verilator")}
    p_cycles, p_sent, p_recv, p_count = results["pysim"]
    v_cycles, v_sent, v_recv, v_count = results["verilator"]
    # The loopback returns every frame unchanged and in order...
    assert [f.data for f in p_recv] == [bytes(f) for f in frames]
    # ...and both back ends agree on every byte and every cycle stamp.
    assert p_recv == v_recv
    assert p_sent == v_sent
    assert p_cycles == v_cycles
    assert p_count == v_count
    assert p_count["eth_rx_frames"] == p_count["eth_tx_frames"] == 30
    assert p_count["eth_rx_dropped"] == 0
    # Stalls and gaps were exercised: the stamps show idle cycles inside frames.
    nb = width // 8
    words = [max(1, -(-len(f) // nb)) for f in p_recv]
    assert any(f.cycle_last - f.cycle_first + 1 > w for f, w in zip(p_recv, words))
    assert any(f.cycle_last - f.cycle_first + 1 > w for f, w in zip(p_sent, words))
    # Store-and-forward: a frame leaves only after its last word has entered.
    assert all(o.cycle_first > i.cycle_last for i, o in zip(p_sent, p_recv))


def test_different_seeds_give_different_stall_patterns():
    frames = udp_frames(12, seed=1)
    _, _, a, _ = run_traffic("verilator", 512, frames, seed=1, stall=0.3)
    _, _, b, _ = run_traffic("verilator", 512, frames, seed=2, stall=0.3)
    assert [f.data for f in a] == [f.data for f in b]
    assert [f.cycle_last for f in a] != [f.cycle_last for f in b]


@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_oversize_frame_is_dropped_counted_and_the_next_goes_through(backend):
    frames = [bytes(udp_frames(1, seed=3)[0]), bytes(range(256)) * 12, bytes(Ether() / IP()),
              b"", bytes(Ether() / IP() / UDP() / b"after")]
    with open_sim(loopback.design(512), backend, seed=5, stall=0.2) as sim:
        sim.send_many(frames)
        sim.run(max_cycles=20_000)
        out = [f.data for f in sim.received()]
        counters = sim.counters()
    assert out == [frames[0], frames[2], frames[4]]
    assert counters["eth_rx_dropped"] == 2        # 3072 bytes > max_frame 2048; the empty frame
    assert counters["eth_rx_frames"] == counters["eth_tx_frames"] == 3
    assert counters["reflect_dropped"] == 0


def test_counters_and_run_semantics_match_between_backends():
    frames = udp_frames(6, seed=9)
    seen = {}
    for backend in ("pysim", "verilator"):
        with open_sim(loopback.design(64), backend, seed=11, stall=0.1, idle_cycles=100) as sim:
            assert sim.run(5) == 5 and sim.cycle == 5
            assert sim.run() == 95                 # idle: 100 quiet cycles (idle_cycles)
            assert sim.run() == 0                  # idle already: nothing to do
            sim.send_many(frames[:3])
            first = sim.run(40)                    # exactly 40 cycles, mid-traffic
            mid = sim.counters()
            sim.send_many(frames[3:])
            rest = sim.run()
            seen[backend] = (first, mid, rest, sim.counters(), sim.received(), sim.pending())
    assert seen["pysim"] == seen["verilator"]
    first, mid, rest, final, received, pending = seen["pysim"]
    assert first == 40 and mid["eth_tx_frames"] < 6
    assert final["eth_tx_frames"] == 6 and pending == 0
    assert [f.data for f in received] == [bytes(f) for f in frames]


def test_prng_matches_reference_values():
    # xorshift32 from state 1: the first values of Marsaglia's generator.
    x = Xorshift32(1)
    assert [x.next() for _ in range(3)] == [270369, 67634689, 2647435461]
    assert seed_state(1, 0) != seed_state(1, 1) != 0


def test_second_open_of_an_unchanged_design_does_not_build(monkeypatch):
    design = loopback.design(64)
    t0 = time.monotonic()
    with open_sim(design, "verilator") as sim:
        first_built, first_seconds = sim.built, time.monotonic() - t0
    monkeypatch.setattr(vl, "run_tool", lambda *a, **k: pytest.fail("ran a build tool"))
    monkeypatch.setattr(vl, "_compile_all", lambda *a, **k: pytest.fail("ran the compiler"))
    t0 = time.monotonic()
    with open_sim(loopback.design(64), "verilator") as sim:
        assert sim.cached and not sim.built
        sim.send(Ether() / IP() / UDP())
        sim.run()
        assert len(sim.received()) == 1
    second = time.monotonic() - t0
    assert second < 10
    if first_built:
        assert second < first_seconds / 2


def test_missing_compiler_is_one_clear_error(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/perl", bindir / "perl")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("CXX", raising=False)
    # (Verilog is written before the compiler is looked for; keep Yosys out of this test.)
    monkeypatch.setattr(vl, "design_verilog", lambda top, **_: "module x; endmodule")
    with pytest.raises(BuildError) as info:
        open_sim(loopback.design(64), "verilator", cache_dir=tmp_path / "cache")
    assert info.value.tool == "g++"
    assert "no C++ compiler found" in str(info.value)


def test_failed_build_is_one_clear_error_with_the_log(tmp_path, monkeypatch):
    fake = tmp_path / "fakecxx"
    fake.write_text("#!/bin/sh\necho 'fatal error: the compiler is broken today' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(BuildError) as info:
        open_sim(loopback.design(64), "verilator", cache_dir=tmp_path / "cache")
    assert info.value.tool == str(fake)
    assert "the compiler is broken today" in str(info.value)
    assert "Traceback" not in str(info.value)


def test_bad_arguments_are_clear_errors():
    design = loopback.design(64)
    with pytest.raises(SimError, match="unknown simulation back end"):
        open_sim(design, "iverilog")
    with pytest.raises(SimError, match="stall must be a probability"):
        open_sim(design, "pysim", stall=1.0)
    with open_sim(design, "pysim") as sim:
        with pytest.raises(SimError, match="no Ethernet port 'wan'"):
            sim.send(b"x" * 60, port="wan")
    mesh = load_example("mesh_3x3").design(64)
    with pytest.raises(SimError, match="has no Ethernet port"):
        open_sim(mesh, "pysim")
    with pytest.raises(SimError, match="unknown netlist 'ice40'; choose one of ecp5"):
        open_sim(design, "verilator", netlist="ice40")
    with pytest.raises(SimError, match="netlist='ecp5' runs on Verilator, not on 'pysim'"):
        open_sim(design, "pysim", netlist="ecp5")
    with pytest.raises(SimError, match="netlist_tiles names 'eth_rxx'; the design's tiles are "
                                       f"{', '.join(design.tiles)}"):
        open_sim(design, "verilator", netlist="ecp5", netlist_tiles=["eth_rxx"])
    with pytest.raises(SimError, match="netlist_tiles names no tile"):
        open_sim(design, "verilator", netlist="ecp5", netlist_tiles=[])
    with pytest.raises(SimError, match="netlist_tiles needs netlist="):
        open_sim(design, "verilator", netlist_tiles=list(design.tiles))


@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_run_waits_for_a_long_store_and_forward_frame(backend):
    # The loopback buffers whole frames: while a 1514-byte frame enters at 64 bits (190 cycles)
    # nothing leaves. run() must not call that idle.
    frames = [bytes(f) for f in udp_frames(2, seed=3)]
    frames = [frames[0][:60], bytes(udp_frames(12, seed=3)[0])[:60] + bytes(1454)]
    with open_sim(loopback.design(64), backend, idle_cycles=20) as sim:
        sim.send_many(frames)
        sim.run()
        assert [f.data for f in sim.received()] == frames
        assert sim.counters()["eth_tx_frames"] == 2


def test_gcc_gets_the_alias_query_limits_and_another_compiler_does_not(tmp_path, monkeypatch):
    gcc = shutil.which("g++")
    open_sim(loopback.design(64), "verilator", cache_dir=tmp_path / "gcc").close()
    logs = list((tmp_path / "gcc").rglob("build.log"))
    assert len(logs) == 1 and vl.GCC_LIMITS[0] in logs[0].read_text()
    # A compiler that is not GCC and refuses GCC's --param names still builds the model.
    fake = tmp_path / "clangish"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && echo 'clang version 18.1.8' && exit 0\n"
                    f"for a; do case $a in --param*) echo \"unknown argument: $a\" >&2; exit 1;; "
                    f"esac; done\nexec {gcc} \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    with open_sim(loopback.design(64), "verilator", cache_dir=tmp_path / "other") as sim:
        assert sim.built
        sim.send(Ether() / IP() / UDP())
        sim.run()
        assert len(sim.received()) == 1
