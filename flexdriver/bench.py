"""FlexDriver's figures, measured: ``python -m flexdriver.bench [--markdown]``.

* **Echo round trip**: one UDP frame into the NIC model's wire, FLD and FLD-E in Amaranth's
  simulator behind it (:class:`~flexdriver.fld_echo.FldEchoTop`), cycles from the frame's arrival
  to the answer's departure, with every DMA request and doorbell taking ``--latency`` cycles
  (the modelled PCIe round trip).
* **Echo throughput**: ``--frames`` frames offered one every ``gap`` cycles, the time a frame
  takes on a 100 Gb/s wire at the clock (``--clock-mhz``): the frames answered, the answers per
  cycle between the first answer's departure and the last's, and what the NIC, FLD or the echo
  dropped; with 2 queues each way and with 512 (the frames spread over the receive queues by
  RSS, each answered on its own send queue). The link between the model and FLD moves one word
  a cycle and serves one read at a time (:class:`~flexdriver.sim.FldLink`), as FLD answers them.
* **On-chip memory**: every memory FLD instantiates (:func:`memories`, from the elaborated
  design, block by block), at the small map the measurements use (:class:`~flexdriver.fld.FldMap`'s
  defaults), then at FlexDriver's Table 2a (:meth:`~flexdriver.fld.FldMap.sized`) grouped into
  Table 3's rows beside the paper's FLD column, and at 400 Gb/s with 2,048 queues beside the
  same formulas and a software driver's (the paper's Figure 4 claim).
* **Area**: FLD at 512 bits, at the small map and at Table 2a's, through Yosys's
  ``synth_xilinx`` (UltraScale+, as :mod:`apiary.bench.area` does for the tiles).
"""

import argparse
import ipaddress
import sys
from typing import Any

from .control import FldControl
from .fld import FldMap
from .fld_echo import FldEchoTop
from .nic import NicModel
from .sim import FldLink, read_count


__all__ = ["echo_run", "memories", "measure", "main"]

MAC, IP_ADDR, PEER = 0x02_00_00_00_0F_1D, "10.0.0.2", "10.0.0.1"
WIRE_BYTES_PER_FRAME = 20               # preamble, start of frame, inter-frame gap


def _frame(size: int, sport: int) -> bytes:
    """A UDP frame of ``size`` bytes on the wire (without FCS) to the echo."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    head = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:0f:1d") / IP(src=PEER, dst=IP_ADDR) \
        / UDP(sport=sport, dport=7)
    return bytes(head / bytes(max(0, size - len(head))))


def echo_run(width: int, *, latency: int, size: int, frames: int, gap: int,
             fld_map: FldMap | None = None) -> dict[str, Any]:
    """Offer ``frames`` frames of ``size`` bytes, one every ``gap`` cycles, to FLD-E behind the
    NIC model (FLD at ``fld_map``); returns the cycles of each frame's arrival and answer, and
    the drops."""
    from apiary.stream.testbench import simulate
    fld_map = fld_map or FldMap()
    top = FldEchoTop(width, mac=MAC, ip=int(ipaddress.IPv4Address(IP_ADDR)), fld_map=fld_map)
    link = FldLink(top)
    nic = link.nic = NicModel(link, latency=latency, jitter=0)
    FldControl(nic, fld_map).create_queues()
    out: dict[str, Any] = {}
    sent = [_frame(size, 1000 + k) for k in range(frames)]

    async def wire(ctx: Any) -> None:
        await ctx.tick().repeat(4 * latency)        # the receive doorbells land
        for frame in sent:
            nic.receive(frame)
            await ctx.tick().repeat(gap)
        while len(nic.wire) < frames and (nic.busy or link.reads or link.words
                                          or link.cycle - out.setdefault("idle", 0) < 4096):
            if nic.busy or link.reads or link.words:
                out["idle"] = link.cycle
            await ctx.tick()
        out["fld_dropped"] = sum(read_count(ctx, top.rx_dropped_queue, top.rx_dropped, q)
                                 for q in range(fld_map.rx_queues))
        out["echo_overflow"] = int(ctx.get(top.counters.overflow))

    simulate(top, wire, background=[link.run])
    arrived = [t for t, _ in nic.arrived]
    answered = [t for t, _ in nic.wire]
    return {"arrived": arrived, "answered": answered, "queues": len(set(
        nic.counters.tx_packets)), "nic_dropped": sum(nic.counters.out_of_buffer.values()),
        **out}


def memories(width: int = 512, fld_map: FldMap | None = None) -> list[tuple[str, int, int]]:
    """``(block, depth, width)`` of every memory FLD instantiates, from the elaborated design."""
    from amaranth.hdl import Fragment, Shape
    from amaranth.hdl._ir import Fragment as IrFragment
    from amaranth.lib.memory import Memory
    from .fld import Fld
    found: list[tuple[str, int, int]] = []

    def walk(fragment: IrFragment, path: str) -> None:
        origins = getattr(fragment, "origins", None) or ()
        for origin in origins:
            if isinstance(origin, Memory):
                found.append((path, origin.depth, Shape.cast(origin.shape).width))
        for sub, name, _ in fragment.subfragments:
            walk(sub, f"{path}.{name}" if path else str(name))

    walk(Fragment.get(Fld(width, fld_map), None), "")
    return found


#: Table 3's rows (and one it has not: FLD's per-queue drop counters), and the blocks of FLD
#: that make each, by the start of their path.
TABLE_3_ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("tx_rings", "Tx rings (descriptor pool, its cuckoo table, free list)",
     ("tx_path.pool.",)),
    ("tx_buffers", "Tx buffers (pages, the chain that translates them, free pages)",
     ("tx_path.buffer", "tx_path.chain", "tx_path.free_list")),
    ("rx_buffers", "Rx buffers (striding, shared by the queues)", ("rx_path.buffer",)),
    ("completion_queue", "Completion queues (what FLD keeps of each CQE)",
     ("tx_path.done.", "rx_path.completions")),
    ("rx_ring", "Rx ring (kept in host memory)", ()),
    ("producer_indices", "Producer indices (and each send queue's completed count)",
     ("tx_path.posted", "tx_path.completed")),
    ("drop_counters", "Drop counters, per queue (not in Table 3)",
     ("tx_path.drops.", "rx_path.drops.")),
)


def table_3_rows(found: list[tuple[str, int, int]]) -> dict[str, float]:
    """Bytes of FLD's memories ``found`` (:func:`memories`) by Table 3's row; what fits no row
    under ``other``; and ``total``."""
    rows = {key: 0.0 for key, _, _ in TABLE_3_ROWS} | {"other": 0.0}
    for path, depth, bits in found:
        key = next((k for k, _, starts in TABLE_3_ROWS
                    if any(path.startswith(p) for p in starts)), "other")
        rows[key] += depth * bits / 8
    rows["total"] = sum(rows.values())
    return rows


def measure(argv: list[str]) -> int:
    """``python -m flexdriver.bench`` with ``argv``; prints the report, returns 0."""
    parser = argparse.ArgumentParser(prog="python -m flexdriver.bench", description=__doc__)
    parser.add_argument("--widths", default="64,512", help="data widths (default 64,512)")
    parser.add_argument("--sizes", default="64,1500", help="frame sizes in bytes")
    parser.add_argument("--queues", default="2,512", help="queues each way (default 2,512)")
    parser.add_argument("--latency", type=int, default=125,
                        help="cycles per DMA request and doorbell (default 125: 500 ns at 250 "
                             "MHz)")
    parser.add_argument("--frames", type=int, default=64, help="frames for the throughput")
    parser.add_argument("--clock-mhz", type=float, default=250.0)
    parser.add_argument("--no-area", action="store_true", help="skip Yosys")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    queue_counts = [int(q) for q in args.queues.split(",")]
    ns = 1e3 / args.clock_mhz
    wire_bytes_per_cycle = 100e9 / 8 / (args.clock_mhz * 1e6)
    rows = []
    for width in widths:
        for queues in queue_counts:
            fld_map = FldMap(queues=queues, rx_queues=queues)
            for size in sizes:
                one = echo_run(width, latency=args.latency, size=size, frames=1, gap=1,
                               fld_map=fld_map)
                rtt = one["answered"][0] - one["arrived"][0]
                gap = max(1, round((size + WIRE_BYTES_PER_FRAME) / wire_bytes_per_cycle))
                run = echo_run(width, latency=args.latency, size=size, frames=args.frames,
                               gap=gap, fld_map=fld_map)
                answered = len(run["answered"])
                span = run["answered"][-1] - run["answered"][0] if answered > 1 else 0
                rate = (answered - 1) / span if span else 0.0     # departures, steady state
                gbps = rate * size * 8 * args.clock_mhz * 1e6 / 1e9
                rows.append((width, queues, run["queues"], size, rtt, rtt * ns / 1e3, gap,
                             answered, args.frames, rate, gbps,
                             run["nic_dropped"] + run["fld_dropped"] + run["echo_overflow"]))
    _print_echo(rows, args, args.markdown)
    _print_memory(memories(), args.markdown)
    _print_table_3(args.markdown)
    if not args.no_area:
        _print_area(args.markdown)
    return 0


def _print_echo(rows: list[tuple], args: argparse.Namespace, markdown: bool) -> None:
    head = ("width", "queues", "send queues used", "frame B", "round trip (cycles)",
            f"(µs at {args.clock_mhz:g} MHz)", "offered every (cycles)", "answered",
            "answers / cycle", "Gb/s", "dropped")
    lines = [head] + [(str(w), str(q), str(used), str(s), str(rtt), f"{us:.2f}", str(gap),
                       f"{a} of {n}", f"{rate:.4f}", f"{gbps:.1f}", str(d))
                      for w, q, used, s, rtt, us, gap, a, n, rate, gbps, d in rows]
    print(f"FLD-E behind the NIC model, every DMA request and doorbell {args.latency} cycles, "
          f"{args.frames} frames offered at 100 Gb/s of wire, answers per cycle between the "
          f"first answer and the last")
    _table(lines, markdown)


def _print_memory(found: list[tuple[str, int, int]], markdown: bool) -> None:
    f = FldMap()
    print(f"\nFLD's memories at 512 bits, its small map ({f.queues} send queues of "
          f"{f.ring_entries}, a pool of {f.pool_entries} descriptors, {f.pages} transmit pages "
          f"of {f.page_bytes} B, {f.buffers} receive buffers of {f.buffer_bytes} B), from the "
          f"elaborated design")
    lines = [("memory", "depth x width", "KiB")]
    lines += [(path, f"{depth} x {bits}", f"{depth * bits / 8192:.2f}")
              for path, depth, bits in found]
    lines.append(("total", "", f"{sum(d * b for _, d, b in found) / 8192:.2f}"))
    _table(lines, markdown)


def _print_table_3(markdown: bool) -> None:
    from apiary.stream.sizing import KiB, LinkSizing, flexdriver_memory, software_memory
    for link, paper in ((LinkSizing(), True), (LinkSizing(rate_bps=400e9, queues=2048), False)):
        f = FldMap.sized(link)
        ours = table_3_rows(memories(512, f))
        formula, software = flexdriver_memory(link), software_memory(link)
        where = "Table 2a" if paper else "400 Gb/s and 2,048 send queues"
        print(f"\nFLD's memories at {where} ({link.rate_bps / 1e9:g} Gb/s, {link.queues} send "
              f"queues of {f.ring_entries}, a pool of {f.pool_entries} descriptors, {f.pages} "
              f"transmit pages of {f.page_bytes} B, {f.buffers} receive buffers of "
              f"{f.buffer_bytes} B in strides of {f.stride_bytes} B, "
              f"{f.tx_cq_entries} + {f.rx_cq_entries} completions), at 512 bits, from the "
              f"elaborated design, by Table 3's rows")
        fld_head = "FLD, Table 3 (KiB)" if paper else \
            "FLD's formulas, translations at the paper's 15.5 and 33 KiB (KiB)"
        lines = [("structure", fld_head, "ours, built (KiB)", "software driver (KiB)")]
        for key, label, _ in TABLE_3_ROWS:
            lines.append((label, f"{formula.get(key, 0) / KiB:,.2f}" if key in formula else "—",
                          f"{ours[key] / KiB:,.2f}",
                          f"{software[key] / KiB:,.2f}" if key in software else "—"))
        if ours["other"]:
            lines.append(("other", "—", f"{ours['other'] / KiB:,.2f}", "—"))
        diff = (ours["total"] - formula["total"]) / formula["total"] * 100
        lines.append(("total", f"{formula['total'] / KiB:,.2f}", f"{ours['total'] / KiB:,.2f} "
                      f"({diff:+.1f} %)", f"{software['total'] / KiB:,.2f}"))
        _table(lines, markdown)


def _print_area(markdown: bool) -> None:
    from apiary.bench.noc import design_area
    from .fld import Fld
    lines = [("map", "LUTs", "LUTRAM", "FFs", "block RAMs (RAMB18/36)", "UltraRAMs")]
    for name, f in (("small (2 queues)", FldMap()), ("Table 2a (512 queues)", FldMap.sized())):
        area = design_area(Fld(512, f), "xilinx")
        brams = sum(v for k, v in area["cells"].items() if k.startswith("RAMB"))
        urams = sum(v for k, v in area["cells"].items() if k.startswith("URAM"))
        lines.append((name, f"{area['luts']:,}", f"{area['lutram']:,}", f"{area['ffs']:,}",
                      str(brams), str(urams)))
    print("\nFLD's area at 512 bits, Yosys synth_xilinx -family xcup")
    _table(lines, markdown)


def _table(lines: list[tuple], markdown: bool) -> None:
    if markdown:
        print()
        print("| " + " | ".join(lines[0]) + " |")
        print("|" + "|".join("---" for _ in lines[0]) + "|")
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(str(line[k])) for line in lines) for k in range(len(lines[0]))]
    for line in lines:
        print("  ".join(str(c).rjust(w) for c, w in zip(line, widths)))


def main() -> int:
    return measure(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
