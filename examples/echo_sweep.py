"""A sweep of the UDP echo design (udp_echo.py, beside this file): with and without IPv4 options
support, at 64 bits, the echo benchmark's latency and 64- and 256-byte rates at each point.

    apiary sweep examples/echo_sweep.py --out results/

See docs/sweeps.md."""

from harness.sweep import Echo, Sweep


sweep = Sweep(
    "udp_echo.py",                                   # relative to this file
    grid={"width": [64], "ip_options": [True, False]},
    jobs=[Echo(sizes=(64, 256), packets=4)],
    name="echo_sweep",
)
