"""The Apiary kernel's costs: ``apiary bench kernel [--widths 64,512] [--area] [--markdown]``.

Cycle counts come from Amaranth's simulator, exact:

* **monitor latency**: cycles from a message's first flit leaving the tile to its first flit
  leaving the monitor (0 = combinational), for an allowed IPC message and an allowed store, and
  the cycles per message of a back-to-back stream of such messages (1-word payloads) through
  the monitor, beside the same stream on a bare link;
* **allocate / free**: the memory manager from ``MM_ALLOC`` (``MM_FREE``) taken to the first
  flit of ``CAP_INSTALL`` (or, for a free, to the allocator being ready for the next request),
  with a free block of the right size, after one split, and in the worst case (a 4096-block
  memory split down to one block).

With ``--area``, Yosys ``synth_xilinx`` of one monitor (8 segment entries, 8 + 8 IPC entries,
the default :class:`~apiary.os.monitor.MonitorConfig`), of the memory manager (one 256-block
memory: its allocator's bitmaps and searches grow with the blocks, and Yosys takes over half an
hour at 4096) and of the error manager, at each width.
"""

import argparse
import sys
from typing import Any

from ..noc.header import Message, NocHeader
from ..noc.testbench import recv_flits, send_flits
from ..stream.testbench import WithCycleCounter, simulate, transfers
from ..tile import TileEnv
from ..os.memory_manager import MemoryManagerTile
from ..os.memory_tile import STORE_MEM, mem_message_flits
from ..os.monitor import Monitor, MonitorConfig
from ..os.uapi import KernelMeta, KernelMsgType as K, kernel_message_flits, virtual_address


__all__ = ["monitor_latency", "alloc_latency", "main"]

_TILE, _PEER, _MANAGER, _ERRORS, _MEMORY = (1, 1), (2, 1), (3, 0), (3, 1), (0, 3)


def _monitor(width: int) -> Monitor:
    return Monitor(TileEnv(width=width, x=_TILE[0], y=_TILE[1]), MonitorConfig(),
                   ipc_out=[(*_PEER, None)], kernel=[_MANAGER, _ERRORS, _MEMORY],
                   manager=_MANAGER, errors=_ERRORS)


def monitor_latency(width: int, count: int = 32) -> dict[str, Any]:
    """``{"ipc", "store", "ipc_stream", "store_stream", "wire_stream"}``: added latency of the
    first message, cycles per message of ``count`` back-to-back ones (and on a bare link)."""
    nb = width // 8
    ipc = Message(NocHeader(dst_x=_PEER[0], dst_y=_PEER[1], src_x=_TILE[0], src_y=_TILE[1],
                            msg_type=12), [], bytes(nb)).flits(width)
    install = kernel_message_flits(width, K.CAP_INSTALL, KernelMeta(
        op=K.CAP_ALLOC.value, addr=0x1000, size=1 << 16, perm=3, mem_x=_MEMORY[0],
        mem_y=_MEMORY[1], root=1), src=_MANAGER, dst=_TILE)
    store = mem_message_flits(width, STORE_MEM, virtual_address(0, 64), nb, bytes(nb),
                              src=_TILE, dst=(9, 9))
    result: dict[str, Any] = {}
    for kind, flits in (("ipc", ipc), ("store", store)):
        mon = _monitor(width)
        dut = WithCycleCounter(mon)
        took: list[int] = []
        left: list[int] = []
        firsts = len(flits)

        async def main(ctx: Any, flits: list = flits, mon: Monitor = mon) -> None:
            ctx.set(mon.noc_out.ready, 1)
            ctx.set(mon.tile_in.ready, 1)
            await send_flits(ctx, mon.noc_in, install)
            await ctx.tick().repeat(20)
            for _ in range(count):
                await send_flits(ctx, mon.tile_out, flits)
            await ctx.tick().repeat(40)

        simulate(dut, main, background=[transfers(mon.tile_out, took),
                                        transfers(mon.noc_out, left)], timeout=20_000)
        left = left[-count * firsts:]           # the CAP_ALLOC result went to the tile side
        result[kind] = left[0] - took[0]
        result[f"{kind}_stream"] = (left[-1] - left[0] + 1) / count
        result[f"{kind}_flits"] = firsts
    result["wire_stream"] = float(len(ipc))
    return result


def alloc_latency(width: int) -> dict[str, int]:
    """``{"free_block", "one_split", "worst", "free"}``: cycles from the request's last flit in
    to the answer's first flit out (a free, which has no answer: how much longer an allocation
    sent right behind it waits than one sent alone)."""
    mm = MemoryManagerTile(TileEnv(width=width, x=_MANAGER[0], y=_MANAGER[1]),
                           memories=[(*_MEMORY, 4096 * 256)], block_bytes=256)
    dut = WithCycleCounter(mm)
    out: dict[str, int] = {}

    def alloc(size: int) -> list:
        return kernel_message_flits(width, K.MM_ALLOC, KernelMeta(size=size, perm=3), src=_TILE,
                                    dst=_MANAGER)

    async def main(ctx: Any) -> None:
        async def timed(flits: list) -> int:
            await send_flits(ctx, mm.noc_in, flits)
            start = ctx.get(dut.cycle) - 1      # the cycle the last flit was taken
            while not ctx.get(mm.noc_out.valid):
                await ctx.tick()
            now = ctx.get(dut.cycle)
            await recv_flits(ctx, mm.noc_out)
            return now - start

        out["worst"] = await timed(alloc(256))          # splits 4096 blocks down to one
        out["free_block"] = await timed(alloc(256))     # its buddy is free
        out["one_split"] = await timed(alloc(256))      # splits a 2-block buddy
        # Free the first block (no copies to revoke), then ask for a block again at once: the
        # free's own cost is what the allocation after it waits beyond its 4 cycles.
        free = kernel_message_flits(width, K.MM_FREE, KernelMeta(root=0), src=_TILE,
                                    dst=_MANAGER)
        await send_flits(ctx, mm.noc_in, free)
        start = ctx.get(dut.cycle) - 1
        await send_flits(ctx, mm.noc_in, alloc(256))
        while not ctx.get(mm.noc_out.valid):
            await ctx.tick()
        out["free"] = ctx.get(dut.cycle) - start - out["free_block"] - \
            (len(alloc(256)))            # less the allocation's flits and latency
        await recv_flits(ctx, mm.noc_out)
    simulate(dut, main, timeout=20_000)
    return out


def areas(width: int) -> dict[str, dict]:
    from .noc import design_area
    from ..os.error_manager import ErrorManagerTile
    env = TileEnv(width=width, x=_MANAGER[0], y=_MANAGER[1])
    return {
        "monitor": design_area(_monitor(width)),
        "memory manager (256 blocks)": design_area(
            MemoryManagerTile(env, memories=[(*_MEMORY, 256 * 256)], block_bytes=256)),
        "error manager (64 faults)": design_area(ErrorManagerTile(env)),
    }


def markdown(widths: list[int], lat: dict, alloc: dict, area: dict | None) -> str:
    cols = " | ".join(f"{w} bits" for w in widths)
    sep = "|".join("---" for _ in range(len(widths) + 2))
    lines = [f"| what | {cols} | thesis / target |", f"|{sep}|"]

    def row(what: str, values: list, note: str = "") -> None:
        lines.append(f"| {what} | {' | '.join(str(v) for v in values)} | {note} |")

    row("monitor: cycles added to an allowed IPC message", [lat[w]["ipc"] for w in widths],
        "not measured in the thesis; target 0 at 512, at most 1")
    row("monitor: cycles added to an allowed store (checked, translated)",
        [lat[w]["store"] for w in widths], "")
    row("IPC messages back to back: cycles per message through the monitor (bare link)",
        [f"{lat[w]['ipc_stream']:g} ({lat[w]['wire_stream']:g})" for w in widths], "")
    row("stores back to back: cycles per message through the monitor (flits per message)",
        [f"{lat[w]['store_stream']:g} ({lat[w]['store_flits']})" for w in widths], "")
    row("allocate, a free block of the size", [alloc[w]["free_block"] for w in widths],
        "thesis: 1.8 µs = 450 cycles (TCP buffers); target ≤ 50")
    row("allocate, one split", [alloc[w]["one_split"] for w in widths], "")
    row("allocate, worst case (4096 blocks split to one)", [alloc[w]["worst"] for w in widths],
        "")
    row("free (no copies to revoke): extra cycles an allocation sent right behind it waits",
        [alloc[w]["free"] for w in widths], "")
    if area:
        for name in next(iter(area.values())):
            row(f"{name}: LUTs / LUTRAM / FFs (Yosys `synth_xilinx`)",
                [f"{area[w][name]['luts']:,} / {area[w][name]['lutram']:,} / "
                 f"{area[w][name]['ffs']:,}" for w in widths], "")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apiary bench kernel",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,512", metavar="W,W",
                        help="data-plane widths (default 64,512)")
    parser.add_argument("--area", action="store_true", help="also synthesise (Yosys, slow)")
    parser.add_argument("--markdown", action="store_true", help="Markdown (the default)")
    args = parser.parse_args(argv)
    try:
        widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        parser.error(f"--widths takes comma-separated widths, not {args.widths!r}")
    lat = {w: monitor_latency(w) for w in widths}
    alloc = {w: alloc_latency(w) for w in widths}
    area = {w: areas(w) for w in widths} if args.area else None
    command = "apiary bench kernel" + (" --area" if args.area else "")
    print(f"Produced by `{command}` (Amaranth's simulator; areas from Yosys).\n")
    print(markdown(widths, lat, alloc, area))
    return 0


if __name__ == "__main__":
    sys.exit(main())

