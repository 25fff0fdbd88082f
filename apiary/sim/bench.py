"""Measure the simulation back ends: ``python -m apiary.sim.bench``.

* Simulated cycles per second for a 3×3 mesh at 512 bits on both back ends. The design
  (:func:`mesh_loopback`) is a :class:`FramePortTile` at (0, 0) and a :class:`ForwardTile` at
  (2, 2) that returns every frame, so each frame crosses the mesh corner to corner and back
  (9 routers, 8 hops); the other seven positions are router-only. It runs with a stream of
  1514-byte frames in flight, so the routers are busy.
* Frames per second through the Verilator harness (frame_loopback at 512 bits): 60-byte and
  1514-byte frames pushed in one batch, run until idle, collected in one batch (input paced
  with 60 % idle gaps so that the store-and-forward port drops nothing).

Wall-clock figures are medians of ``--repeat`` runs (default 3), after the model is built.
"""

import argparse
import statistics
import time

from ..design import Design
from ..tiles.forward import ForwardTile
from ..tiles.frame_port import FramePortTile
from . import open_sim


__all__ = ["loopback", "mesh_loopback", "frame_loopback", "cycles_per_second", "frames_per_second",
           "main"]


def loopback(name, cols, rows, width=512):
    """A frame port at (0, 0) and a tile in the far corner that returns every frame."""
    d = Design(name, cols=cols, rows=rows, width=width)
    d.add("eth", FramePortTile, at=(0, 0))
    d.add("reflect", ForwardTile, at=(cols - 1, rows - 1))
    d.route("eth", "reflect")
    d.route("reflect", "eth")
    return d


def mesh_loopback(width=512):
    """All nine routers of a 3×3 mesh exist; the corner-to-corner path is busy."""
    return loopback("mesh3x3_loopback", 3, 3, width)


def frame_loopback(width=512):
    return loopback("frame_loopback", 2, 1, width)


def _frame(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def cycles_per_second(backend, cycles, repeat=3, width=512):
    """Median simulated cycles per wall-clock second of :func:`mesh_loopback` under load."""
    rates = []
    with open_sim(mesh_loopback(width), backend, seed=1) as sim:
        frame = _frame(1514)
        per_frame = -(-1514 // (width // 8)) + 1
        for _ in range(repeat):
            sim.send_many([frame] * (cycles // per_frame + 1))
            t0 = time.perf_counter()
            sim.run(cycles)
            rates.append(cycles / (time.perf_counter() - t0))
            sim.run()                     # drain before the next repeat
            sim.received(clear=True)
    return statistics.median(rates)


def frames_per_second(size, count, repeat=3, width=512):
    """Median frames per wall-clock second through the Verilator harness (push, run, take)."""
    rates = []
    # Input gaps of 60 %: a frame of w words takes w + 1 flits on the NoC (the header), so a
    # loopback cannot take frames back to back at line rate; paced like this, none is dropped.
    with open_sim(frame_loopback(width), "verilator", seed=1, gaps=0.6) as sim:
        frame = _frame(size)
        for _ in range(repeat):
            t0 = time.perf_counter()
            sim.send_many([frame] * count)
            sim.run(max_cycles=10 ** 9)
            got = sim.received(clear=True)
            rates.append(count / (time.perf_counter() - t0))
            assert len(got) == count and got[-1].data == frame
    return statistics.median(rates)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m apiary.sim.bench",
                                description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--pysim-cycles", type=int, default=500)
    p.add_argument("--verilator-cycles", type=int, default=500_000)
    p.add_argument("--frames", type=int, default=50_000)
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    open_sim(mesh_loopback(), "verilator").close()
    open_sim(frame_loopback(), "verilator").close()
    print(f"models ready in {time.perf_counter() - t0:.1f} s (0 if cached)")
    rows = [
        ("3x3 mesh, 512 bit, pysim", "cycles/s",
         cycles_per_second("pysim", args.pysim_cycles, args.repeat)),
        ("3x3 mesh, 512 bit, verilator", "cycles/s",
         cycles_per_second("verilator", args.verilator_cycles, args.repeat)),
        ("loopback 512 bit, 60 B frames, verilator", "frames/s",
         frames_per_second(60, args.frames, args.repeat)),
        ("loopback 512 bit, 1514 B frames, verilator", "frames/s",
         frames_per_second(1514, args.frames // 5, args.repeat)),
    ]
    width = max(len(r[0]) for r in rows)
    for what, unit, value in rows:
        print(f"{what:<{width}}  {value:>12,.0f} {unit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
