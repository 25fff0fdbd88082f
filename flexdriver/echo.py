"""FlexDriver's echo (FLD-E, the paper's Table 6), in software, on the NIC model: a driver that
does what FLD and its echo accelerator do together, so that the model's queues, doorbells,
completions and offloads can be driven by a real peer before the FLD module exists.

:class:`SoftwareEcho` creates one completion queue, one send queue and one receive queue on a
:class:`~flexdriver.nic.NicModel`, posts receive buffers, and on each receive completion answers
the frame: an ARP request for its address with the ARP reply, a UDP datagram to it with the
datagram back (addresses and ports swapped; the NIC fills in both checksums, ``L3_CSUM`` and
``L4_CSUM``); anything else is counted and dropped. The buffer goes back to the receive queue
at once; every send is signalled, and its completion frees its transmit slot.

``python -m flexdriver.echo --tap TAP --ip 10.0.0.2`` bridges the NIC's wire to a TAP device,
so that Linux reaches the echo through the NIC model (``tests/flexdriver/test_tap_echo.py``
does so in a network namespace of its own).
"""

import argparse
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from .formats import (CQE_BYTES, CQE_ERROR, CQE_RECV, CQE_SEND, L3_CSUM, L4_CSUM,
                      RX_DESC_BYTES, SIGNALED, WQE_BYTES, Cqe, RxDesc, TxWqe)
from .nic import Bus, NicModel


__all__ = ["SoftwareEcho", "EchoCounters", "main"]

CQ_BASE, SQ_BASE, RQ_BASE = 0x0001_0000, 0x0002_0000, 0x0003_0000
SQ, RQ, CQ = 0, 1, 0                        # the queues' numbers
RX_BUFFERS, TX_BUFFERS = 0x0010_0000, 0x0020_0000
BUFFER = 2048
_INVALID = Cqe(0xF, 1, 0, 0).pack()        # what a completion slot holds before the NIC writes


@dataclass
class EchoCounters:
    """``echoed`` UDP datagrams, ``arp_replies``, ``ignored`` frames, ``errors`` (error
    completions), ``tx_busy`` (no transmit slot free: the frame was not answered)."""
    echoed: int = 0
    arp_replies: int = 0
    ignored: int = 0
    errors: int = 0
    tx_busy: int = 0
    checks: list[int] = field(default_factory=list)   # each received frame's CQE checks


class SoftwareEcho:
    """The echo (see the module docstring) at ``mac`` and ``ip`` on ``nic``, whose DMA reaches
    ``memory``; ``entries`` per queue (the completion queue has twice as many)."""

    def __init__(self, nic: NicModel, memory: Bus, mac: str, ip: str, *, entries: int = 64,
                 port: int = 7) -> None:
        self.nic, self.memory, self.mac, self.ip, self.port = nic, memory, mac, ip, port
        self.entries, self.cq_entries = entries, 2 * entries
        self.counters = EchoCounters()
        for i in range(self.cq_entries):
            memory.write(CQ_BASE + i * CQE_BYTES, _INVALID)
        nic.create_cq(CQ, CQ_BASE, self.cq_entries)
        nic.create_sq(SQ, SQ_BASE, entries, cq=CQ)
        nic.create_rq(RQ, RQ_BASE, entries, cq=CQ)
        nic.set_rss([RQ])
        for i in range(entries):
            memory.write(RQ_BASE + i * RX_DESC_BYTES, RxDesc(RX_BUFFERS + i * BUFFER,
                                                             BUFFER).pack())
        self.rq_producer = entries
        nic.rq_doorbell(RQ, self.rq_producer)
        self.cq_consumer = 0
        self.sq_producer = 0
        self.sq_free = entries

    def poll(self) -> int:
        """Take every new completion; returns how many."""
        taken = 0
        while True:
            slot = self.cq_consumer % self.cq_entries
            cqe = Cqe.unpack(self.memory.read(CQ_BASE + slot * CQE_BYTES, CQE_BYTES))
            if cqe.owner != (self.cq_consumer // self.cq_entries) & 1:
                break                                   # not written yet in this pass
            self.cq_consumer += 1
            taken += 1
            if cqe.opcode == CQE_SEND:
                self.sq_free += 1
            elif cqe.opcode == CQE_RECV:
                self._received(cqe)
            elif cqe.opcode == CQE_ERROR:
                self.counters.errors += 1
                if cqe.queue == RQ:
                    self._repost()
                else:
                    self.sq_free += 1
        if taken:
            self.nic.cq_doorbell(CQ, self.cq_consumer)
        return taken

    def _received(self, cqe: Cqe) -> None:
        index = cqe.counter
        frame = self.memory.read(RX_BUFFERS + (index % self.entries) * BUFFER, cqe.length)
        self.counters.checks.append(cqe.checks)
        self._repost()
        reply = self._answer(frame)
        if reply is None:
            self.counters.ignored += 1
        elif self.sq_free == 0:
            self.counters.tx_busy += 1
        else:
            self._send(*reply)

    def _repost(self) -> None:
        """The oldest buffer back to the receive queue (it is read, or was never filled)."""
        self.rq_producer += 1
        self.nic.rq_doorbell(RQ, self.rq_producer)

    def _answer(self, frame: bytes) -> tuple[bytes, int] | None:
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import ARP, Ether
        pkt = Ether(frame)
        if ARP in pkt and pkt[ARP].op == 1 and pkt[ARP].pdst == self.ip:
            self.counters.arp_replies += 1
            arp = pkt[ARP]
            return bytes(Ether(src=self.mac, dst=pkt.src) / ARP(
                op=2, hwsrc=self.mac, psrc=self.ip, hwdst=arp.hwsrc, pdst=arp.psrc)), 0
        if IP in pkt and UDP in pkt and pkt[IP].dst == self.ip and pkt[UDP].dport == self.port:
            self.counters.echoed += 1
            ip, udp = pkt[IP], pkt[UDP]
            # Both checksums left wrong on purpose: the NIC fills them in (L3_CSUM, L4_CSUM).
            reply = Ether(src=self.mac, dst=pkt.src) / IP(src=self.ip, dst=ip.src, chksum=0) / \
                UDP(sport=udp.dport, dport=udp.sport, chksum=0xFFFF) / bytes(udp.payload)
            return bytes(reply), L3_CSUM | L4_CSUM
        return None

    def _send(self, frame: bytes, flags: int) -> None:
        index = self.sq_producer
        slot = index % self.entries
        address = TX_BUFFERS + slot * BUFFER
        self.memory.write(address, frame[18:])
        self.memory.write(SQ_BASE + slot * WQE_BYTES, TxWqe(
            index & 0xFFFF, SQ, address, len(frame) - 18, frame[:18], SIGNALED | flags).pack())
        self.sq_producer += 1
        self.sq_free -= 1
        self.nic.sq_doorbell(SQ, self.sq_producer & 0xFFFF)


def main(argv: list[str] | None = None) -> int:
    """``python -m flexdriver.echo --tap TAP --ip A.B.C.D [--hardware]``: the echo on the NIC
    model, its wire bridged to the TAP device, until SIGINT or SIGTERM; prints its counters
    then. With ``--hardware`` the echo is FLD and FLD-E in Amaranth's simulator
    (:class:`~flexdriver.fld_echo.FldEchoTop`), the model's DMA and doorbells crossing to it a
    cycle at a time (:class:`~flexdriver.sim.FldLink`)."""
    parser = argparse.ArgumentParser(prog="python -m flexdriver.echo", description=__doc__)
    parser.add_argument("--tap", required=True, help="the TAP device (created if missing)")
    parser.add_argument("--ip", required=True, help="the echo's IPv4 address")
    parser.add_argument("--mac", default="02:00:00:00:0f:1d", help="the echo's MAC address")
    parser.add_argument("--latency", type=int, default=100,
                        help="cycles per DMA request and doorbell (default 100)")
    parser.add_argument("--jitter", type=int, default=20, help="cycles of jitter at most")
    parser.add_argument("--hardware", action="store_true",
                        help="FLD and the echo accelerator in Amaranth's simulator, not the "
                             "software driver")
    parser.add_argument("--width", type=int, default=64,
                        help="with --hardware: FLD's data width in bits (default 64)")
    parser.add_argument("--accelerator", choices=("echo", "rs"), default="echo",
                        help="with --hardware: what sits behind FLD, FLD-E (echo, the default) "
                             "or Beehive's Reed-Solomon encoder (rs: eight 64-byte shards to UDP "
                             "port 9000 answered with their two parity shards)")
    parser.add_argument("--pcap", metavar="FILE",
                        help="on exit, write every frame of the NIC's wire, both ways, to FILE")
    parser.add_argument("--clock-mhz", type=float, default=250.0,
                        help="the cycle's clock, for the pcap's times (default 250)")
    args = parser.parse_args(argv)
    from apiary.sim.core import SimError
    from apiary.sim.tap import TapDevice
    try:
        tap = TapDevice(args.tap)
    except SimError as e:                          # no root, no /dev/net/tun, a bad name
        print(f"python -m flexdriver.echo: {e}", file=sys.stderr)
        return 1
    running = [True]

    def stop(*_: object) -> None:
        running[0] = False
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    nic, report = (_hardware if args.hardware else _software)(args, tap, running)
    tap.close()
    if args.pcap:
        nic.capture(args.pcap, args.clock_mhz * 1e6)
    print(f"stopped: {report}; NIC out_of_buffer {sum(nic.counters.out_of_buffer.values())}, "
          f"cycle {nic.now}", flush=True)
    return 0


def _software(args: argparse.Namespace, tap: Any, running: list[bool]) -> tuple[NicModel, str]:
    from .nic import HostMemory
    memory = HostMemory()
    nic = NicModel(memory, latency=args.latency, jitter=args.jitter)
    echo = SoftwareEcho(nic, memory, args.mac, args.ip)
    nic.advance(4 * (args.latency + args.jitter))      # the receive buffers' doorbell lands
    print(f"bridging the NIC model (echo at {args.ip}) to {args.tap}", flush=True)
    sent = 0
    while running[0]:
        for frame in tap.read_frames():
            nic.receive(frame)
        for _ in range(8):                           # a few DMA latencies per look at the TAP
            nic.advance(nic.now + args.latency + args.jitter)
            echo.poll()
        for _, frame in nic.wire[sent:]:
            tap.write_frame(frame)
        sent = len(nic.wire)
        tap.wait(0.01)
    c = echo.counters
    return nic, (f"echoed {c.echoed}, ARP replies {c.arp_replies}, ignored {c.ignored}, "
                 f"errors {c.errors}, no transmit slot {c.tx_busy}")


def _hardware(args: argparse.Namespace, tap: Any, running: list[bool]) -> tuple[NicModel, str]:
    import ipaddress
    from apiary.stream.testbench import simulate
    from .control import FldControl
    from .fld_echo import FldEchoTop
    from .fld_rs import FldRsTop
    from .sim import FldLink, read_count
    mac, ip = int(args.mac.replace(":", ""), 16), int(ipaddress.IPv4Address(args.ip))
    top = (FldRsTop if args.accelerator == "rs" else FldEchoTop)(args.width, mac=mac, ip=ip)
    link = FldLink(top)
    nic = NicModel(link, latency=args.latency, jitter=args.jitter)
    link.nic = nic
    FldControl(nic, top.map).create_queues()
    report: list[str] = []

    async def bridge(ctx: Any) -> None:
        await ctx.tick().repeat(4 * (args.latency + args.jitter))   # the doorbell lands
        what = "FLD-E" if args.accelerator == "echo" else "the RS encoder behind FLD"
        print(f"bridging the NIC model ({what} in Amaranth's simulator, {args.width} bits, at "
              f"{args.ip}) to {args.tap}", flush=True)
        sent, quiet = 0, 0
        while running[0]:
            for frame in tap.read_frames():
                nic.receive(frame)
                quiet = 0
            await ctx.tick().repeat(32)
            for _, frame in nic.wire[sent:]:
                tap.write_frame(frame)
            sent = len(nic.wire)
            busy = nic.busy or link.reads or link.words
            quiet = 0 if busy else quiet + 32
            if quiet > 4096:                        # nothing in flight: wait for Linux
                tap.wait(0.01)
        counts = [f"{name.replace('_', ' ')} {int(ctx.get(getattr(top.counters, name)))}"
                  for name in top.counters.signature.members]
        dropped = read_count(ctx, top.rx_dropped_queue, top.rx_dropped, 0)
        report.append(", ".join(counts) + f", FLD dropped {dropped}")

    simulate(top, bridge, background=[link.run])
    return nic, report[0]


if __name__ == "__main__":
    sys.exit(main())
