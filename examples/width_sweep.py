"""The UDP echo design (udp_echo.py, beside this file) at every data-plane width, with and
without IPv4 options support: the echo benchmark on Verilator per payload size (a table row
each), and the area of the six protocol tiles in Yosys. Its plots: throughput against payload
size (a line per width), latency against width, and the Pareto front of area against 64-byte
throughput. docs/sweeps.md shows them.

    apiary sweep examples/width_sweep.py --out results/ --open

About 15 minutes the first time on two cores (eight Verilator models, eight syntheses); a
re-run takes seconds.
"""

from harness.sweep import Area, Echo, Sweep


SIZES = (64, 128, 256, 512, 1024, 1472)

sweep = Sweep(
    "udp_echo.py",                                   # relative to this file
    grid={"width": [64, 128, 256, 512], "ip_options": [True, False]},
    jobs=[
        Echo(sizes=SIZES, packets=20, backend="verilator", per_size=True),
        Area(target="xilinx", tiles=("eth_rx", "ip_rx", "udp_rx", "udp_tx", "ip_tx", "eth_tx")),
    ],
    plots=[("echo payload", "echo gbps", "width"), ("width", "echo latency_cycles",
                                                    "ip_options")],
    paretos=[("area luts", "echo 64B_gbps", "width,ip_options")],
    name="width_sweep",
)
