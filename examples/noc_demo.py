"""The NoC demo: check two layouts of the paper's Fig. 5, draw them, and send messages through the
sound one on the simulated network-on-chip.

    python examples/noc_demo.py [--width 64|512] [-o OUTDIR]
"""

import argparse
import pathlib
import random
import sys


from apiary.design import DesignError
from apiary.load import load_design
from apiary.noc import Message, NocHeader
from apiary.noc.testbench import recv_message, send_message
from apiary.stream.testbench import WithCycleCounter, simulate
from apiary.show import render_svg
from apiary.top import DesignTop

HERE = pathlib.Path(__file__).resolve().parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512, choices=[64, 128, 256, 512])
    parser.add_argument("-o", "--out", default="out", help="where to write the SVG drawings")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    for name in ("deadlock_fig5a", "deadlock_fig5b"):
        design = load_design(str(HERE / f"{name}.py"), width=args.width)
        print(f"== {name}: {len(design.tiles)} tiles on a {design.cols}x{design.rows} mesh")
        try:
            graph = design.check()
            print("   layout sound, no message-level deadlock")
        except DesignError as error:
            graph = None
            print("   " + str(error).replace("\n", "\n   "))
        (out / f"{name}.svg").write_text(render_svg(design, graph))
        print(f"   drawn to {out / (name + '.svg')}")

    design = load_design(str(HERE / "deadlock_fig5b.py"), width=args.width)
    top = DesignTop(design)
    width = design.width
    rng = random.Random(0)
    messages = [Message(NocHeader(msg_type=1), payload=bytes(rng.getrandbits(8) for _ in range(n)))
                for n in (1, 64, 256, 1500)]
    sent, received = {}, {}
    counted = WithCycleCounter(top)
    cycle = counted.cycle

    async def source(ctx):
        for i, msg in enumerate(messages):
            while i and (i - 1) not in received:   # one message in flight at a time
                await ctx.tick()
            sent[i] = ctx.get(cycle)
            await send_message(ctx, top.eth_tx, msg, width)

    async def sink(ctx):
        for i, msg in enumerate(messages):
            got = await recv_message(ctx, top.app_rx, width)
            received[i] = ctx.get(cycle)
            assert got.payload == msg.payload, "payload changed on the way"

    simulate(counted, sink, background=[source], period=4e-9)
    print(f"== simulated fig5b at {width} bits: eth -> ip -> udp -> app")
    for i, msg in enumerate(messages):
        flits = len(msg.flits(width))
        print(f"   {len(msg.payload):5d} B payload, {flits:3d} flits: last flit out "
              f"{received[i] - sent[i]} cycles after the first flit went in")
    return 0


if __name__ == "__main__":
    sys.exit(main())
