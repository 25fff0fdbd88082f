"""The main demo: the Beehive UDP echo stack (examples/udp_echo.py), checked, drawn, and answering
ARP, ping and UDP from scapy packets in simulation.

    python examples/echo_demo.py [--width 64|512] [--backend pysim|verilator] [-o OUTDIR]

Every reply is compared with what the Python model of the stack (``beehive.model``) expects.
"""

import argparse
import pathlib
import sys

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether

from apiary.design import DesignError
from apiary.load import load_design
from apiary.show import render_svg
from apiary.sim import open_sim
from beehive.model import echo_reply

HERE = pathlib.Path(__file__).resolve().parent
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"


def requests():
    eth = Ether(dst=MAC, src=PEER_MAC)
    return [
        ("ARP: who has 10.0.0.2?", Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC)
         / ARP(op=1, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=IPV4)),
        ("ping 10.0.0.2", eth / IP(src=PEER_IP, dst=IPV4) / ICMP(id=7, seq=1) / bytes(range(56))),
        ("UDP 'hello' to port 7", eth / IP(src=PEER_IP, dst=IPV4) / UDP(sport=40000, dport=7)
         / b"hello, beehive"),
        ("UDP to port 9 (no listener)", eth / IP(src=PEER_IP, dst=IPV4) / UDP(sport=40000, dport=9)
         / b"dropped"),
        ("UDP with a bad checksum", eth / IP(src=PEER_IP, dst=IPV4) / UDP(sport=1, dport=7,
                                                                         chksum=0x1234) / b"bad"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64, choices=[64, 128, 256, 512])
    parser.add_argument("--backend", default="pysim", choices=["pysim", "verilator"])
    parser.add_argument("-o", "--out", default="out", help="where to write the SVG drawing")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    try:
        design = load_design(str(HERE / "udp_echo.py"), width=args.width)
        design.check()
    except DesignError as e:
        sys.exit(str(e))
    svg = out / "udp_echo.svg"
    svg.write_text(render_svg(design))
    print(f"{design.name}: {len(design.tiles)} tiles on a {design.cols}x{design.rows} mesh, "
          f"{args.width}-bit data plane, deadlock-free; drawn in {svg}")

    failures = 0
    with open_sim(design, args.backend, idle_cycles=300) as sim:
        for what, request in requests():
            sim.send(request)
            sim.run()
            sent, = sim.sent(clear=True)
            replies = sim.received(clear=True)
            expected, counter = echo_reply(bytes(request))
            got = replies[0].data if replies else None
            ok = got == expected
            failures += not ok
            if got is None:
                outcome = f"no reply (counted in {counter})"
            else:
                cycles = replies[0].cycle_last - sent.cycle_first
                outcome = f"{Ether(got).summary()}  [{cycles} cycles in to out]"
            print(f"{'ok ' if ok else 'BAD'} {what:32} → {outcome}")
        counters = {k: v for k, v in sim.counters().items() if v}
    print("counters:", ", ".join(f"{k}={v}" for k, v in counters.items()))
    if failures:
        sys.exit(f"{failures} replies differ from the model")


if __name__ == "__main__":
    main()
