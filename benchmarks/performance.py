"""Every table of docs/performance.md that a benchmark prints, as one sweep: each job is an
`apiary bench ...` command (or a platform's own benchmark), named after its block in the
document.

    apiary sweep benchmarks/performance.py --update docs/performance.md --out results/

runs what changed since the last run (every job, the first time: about an hour of CPU; two
workers on this 2-core machine), then writes each report into the block
`<!-- sweep: NAME -->` ... `<!-- end sweep -->` of docs/performance.md that has its name
(every job asks for Markdown: `--markdown`). The
prose around the blocks is written by hand. Not here: figures that are wall-clock times of this
machine (simulation speed, `python -m apiary.sim.bench`; board build times,
`python -m platforms.bench`) and the board builds themselves (nextpnr, minutes each), which a
sweep of `Build` jobs runs (docs/sweeps.md).
"""

from harness.sweep import Bench, Sweep


def bench(name, *args, runner="harness.bench.runner:measure"):
    """`apiary bench ARGS` (or ``runner``), run from the repository's root."""
    return Bench(args=args, name=name, runner=runner, cwd="..")


# Longest first (Yosys on whole designs, then Verilator runs), so that two workers finish
# together.
SIZES = ("--sizes", "64,128,256,512,1024,1472", "--packets", "200")

sweep = Sweep(
    None,
    jobs=[
        bench("slots", "slots", "--slots", "1,2,4", "--width", "512", "--markdown"),
        bench("rs-area", "area", "examples/rs_apiary.py", "--width", "512", "--tiles",
              "app,sched,tcp_rx,tcp_tx", "--markdown"),
        bench("udp-area-xilinx", "area", "examples/udp_echo.py", "--target", "xilinx",
              "--markdown"),
        bench("udp-area-xilinx-low-latency", "area", "examples/udp_echo.py", "--target",
              "xilinx", "--set", "low_latency=True", "--markdown"),
        bench("udp-area-ecp5", "area", "examples/udp_echo.py", "--target", "ecp5", "--width",
              "64", "--markdown"),
        bench("tcp-area", "area", "examples/tcp_echo.py", "--target", "xilinx", "--tiles",
              "tcp_rx,tcp_tx,tcp_echo", "--markdown"),
        bench("tcp-area-4096", "area", "examples/tcp_echo.py", "--target", "xilinx", "--tiles",
              "tcp_rx,tcp_tx", "--set", "flows=4096", "--set", "ring=4096", "--markdown"),
        bench("rs", "rs", "--markdown"),
        bench("replicate", "replicate", "--widths", "512,64", "--clock-mhz", "250",
              "--markdown"),
        bench("replicate-app", "replicate", "--app-cycles", "16", "--copies", "1,2,4,8",
              "--markdown"),
        bench("vr", "vr", "--markdown"),
        bench("control", "control", "--area", "--markdown"),
        bench("nf", "nf", "--markdown"),
        bench("sizing", "sizing", "--markdown"),
        bench("noc", "noc", "--markdown"),
        bench("udp-echo-512", "examples/udp_echo.py", *SIZES, "--clock-mhz", "250",
              "--markdown"),
        bench("udp-echo-64", "examples/udp_echo.py", "--width", "64", *SIZES, "--clock-mhz",
              "125", "--markdown"),
        bench("udp-echo-512-low-latency", "examples/udp_echo.py", "--set", "low_latency=True",
              *SIZES, "--clock-mhz", "250", "--markdown"),
        bench("tcp-echo-512", "examples/tcp_echo.py", "--tcp", "--clock-mhz", "250",
              "--markdown"),
        bench("tcp-echo-64", "examples/tcp_echo.py", "--tcp", "--width", "64", "--clock-mhz",
              "250", "--markdown"),
        bench("tcp-sink", "examples/tcp_sink.py", "--tcp", "--clock-mhz", "250",
              "--markdown"),
        bench("tcp-sink-jumbo", "examples/tcp_sink.py", "--tcp", "--set", "mtu=9000",
              "--clock-mhz", "250", "--markdown"),
        bench("tcp-echo-bulk", "examples/tcp_echo.py", "--tcp", "--set", "bulk=True",
              "--clock-mhz", "250", "--markdown"),
        bench("tcp-4096", "examples/tcp_echo.py", "--tcp", "--connections", "--set",
              "flows=4096", "--set", "ring=4096", "--clock-mhz", "250", "--markdown"),
        bench("tcp-1024-64", "examples/tcp_echo.py", "--tcp", "--connections", "--width", "64",
              "--set", "flows=1024", "--set", "ring=1024", "--set", "mss=512", "--clock-mhz",
              "250", "--markdown"),
        bench("kernel", "kernel", "--area", "--markdown"),
        bench("fld", "--markdown", runner="flexdriver.bench:measure"),
    ],
    name="performance",
)
