"""The sweep that `python -m harness.sweep.scaling` times with 1 and 2 workers (docs/sweeps.md,
"How it scales"): eight points of the UDP echo design at 64 bits (IPv4 options on and off, four
IPv4 addresses, so eight designs), each simulated in Amaranth's simulator (no build to share), the
echo benchmark's latency and 64-, 512- and 1472-byte rates at each.

    python -m harness.sweep.scaling benchmarks/scaling.py --workers 1,2
"""

from harness.sweep import Echo, Sweep


sweep = Sweep(
    "../examples/udp_echo.py",                       # relative to this file
    grid={"width": [64], "ip_options": [True, False],
          "ipv4": ["10.0.0.2", "10.0.0.3", "192.168.1.2", "172.16.0.9"]},
    jobs=[Echo(sizes=(64, 512, 1472), packets=6)],
    name="scaling",
)
