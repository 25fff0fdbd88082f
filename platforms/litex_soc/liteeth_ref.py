"""The peer a small-board user would pick instead of our stack: LiteEth's own UDP/IP core
(``LiteEthUDPIPCore``: MAC, ARP, IPv4, ICMP, UDP) doing UDP echo.

Two measurements, to put beside our ``examples/udp_echo.py``:

* **Area and Fmax** (:func:`build_liteeth_reference`): :class:`LiteEthUdpEchoSoC`, a CPU-less
  LiteX SoC on a :data:`~platforms.litex_soc.boards.LITEX_BOARDS` board (its CRG and RGMII PHY,
  no DRAM), built with the same flow as our SoC (:func:`~platforms.litex_soc.build.write_soc`,
  then Yosys ``synth_ecp5``, nextpnr-ecp5, ecppack by :func:`~.build.run_ecp5_tools`, seed 1)::

      python -m platforms.litex_soc.liteeth_ref build [--board versa_ecp5] [-o DIR] [--dw 8]

* **Latency in cycles** (:func:`measure_liteeth_latency`), cycle-exact in migen's simulator, at
  the MAC↔PHY boundary, as our core is measured by ``apiary bench`` at its ``mac_rx``/``mac_tx``
  (see :class:`FakePHY` for exactly what is and is not inside the measured path)::

      python -m platforms.litex_soc.liteeth_ref latency [--dw 64] [--markdown] [--ours DESIGN]

The echo is a loopback of one UDP user port (:func:`udp_echo_loopback`): each received datagram
goes straight back into the port's sink with source and destination ports swapped, to the
sender's IP address (which LiteEth's IP layer resolves to a MAC address through its ARP table).
"""

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from migen import Cat, ClockDomainsRenamer, Constant, If, Module, Signal
from migen.sim import run_simulation
from litex.soc.integration.soc_core import SoCMini
from litex.soc.interconnect import stream
from liteeth.common import eth_phy_description
from liteeth.core import LiteEthUDPIPCore


__all__ = ["LiteEthUdpEchoSoC", "udp_echo_loopback", "build_liteeth_reference", "FakePHY",
           "LiteEthEchoBench", "udp_request", "check_echo", "measure_liteeth_latency",
           "measure_liteeth_throughput", "measure_ours", "render_latency", "main", "DEFAULT_DW",
           "CLIENT_MAC", "CLIENT_IP"]

#: The datapath width liteeth_gen builds a UDP core with (``data_width`` defaults to 8 in
#: ``liteeth/gen.py``; ``with_sys_datapath`` only for 16 and 32 bits).
DEFAULT_DW = 8

SERVER_MAC = 0x020000000002        # our design's defaults (beehive.proto.addresses)
SERVER_IP = "10.0.0.2"
CLIENT_MAC = "02:00:00:00:00:01"
CLIENT_IP = "10.0.0.1"
ECHO_PORT = 7
MIN_FRAME = 60                     # Ethernet minimum without FCS (requests are padded to it)


# -- the echo --------------------------------------------------------------------------------

def udp_echo_loopback(udp, udp_port, dw):
    """Take a user port on ``udp_port`` from ``udp`` (a ``LiteEthUDP``) and loop its ``source``
    (received datagrams) into its ``sink`` (datagrams to send), combinationally: same data,
    ``last``/``last_be`` and length, ``src_port``/``dst_port`` swapped, sent back to the sender's
    ``ip_address``. Returns ``(port, statements)`` (the statements go into ``comb``).

    There is no buffer: while LiteEth's IP TX waits for its checksum and ARP lookup, the
    back-pressure goes all the way back into its receive path (in hardware, into the MAC's RX
    clock-domain-crossing FIFO)."""
    port = udp.crossbar.get_port(udp_port, dw=dw)
    rx, tx = port.source, port.sink
    return port, [
        tx.valid.eq(rx.valid),
        rx.ready.eq(tx.ready),
        tx.last.eq(rx.last),
        tx.last_be.eq(rx.last_be),
        tx.data.eq(rx.data),
        tx.src_port.eq(rx.dst_port),
        tx.dst_port.eq(rx.src_port),
        tx.ip_address.eq(rx.ip_address),
        tx.length.eq(rx.length),
    ]


# -- the SoC ---------------------------------------------------------------------------------

class LiteEthUdpEchoSoC(SoCMini):
    """LiteEth's ``LiteEthUDPIPCore`` doing UDP echo on ``udp_port`` on the RGMII PHY of ``board``
    (a :class:`~platforms.litex_soc.boards.LiteXBoard`), CPU-less, no DRAM.

    ``dw`` is the core's datapath width. The default, **8 bits**, is what LiteEth's own core
    generator (``liteeth_gen``, ``liteeth/gen.py``) builds a UDP core with for a 1000BASE-T RGMII
    PHY: ``data_width`` defaults to 8 and ``with_sys_datapath`` is set only for 16 and 32 bits,
    so the MAC (preamble, CRC, padding) runs in the PHY's 125 MHz ``eth_rx``/``eth_tx`` domains
    and crosses into ``sys`` at ``dw`` bits. Otherwise as liteeth_gen too: unbuffered CDC FIFOs;
    the core's defaults of a one-entry ARP table and ICMP echo on (our design also answers ARP
    and ping). ``sys`` runs at the board's ``sys_clk_freq`` (75 MHz on the Versa, as our SoC)
    unless ``sys_clk_freq`` is given; at 8 bits, gigabit line rate needs ``sys`` ≥ 125 MHz.

    LEDs (when the board has them): a toggle per echo request taken, a toggle per reply sent, a
    heartbeat (as :class:`~.soc.ApiarySoC`'s, without its DRAM LED).

    Caveat of the bufferless loopback (:func:`udp_echo_loopback`): a datagram from a host that
    LiteEth's one-entry ARP table does not hold (it is cleared after 1 s without a lookup) stalls
    the receive path while LiteEth asks for the host's MAC address, and the ARP reply is stuck
    behind it unless the whole datagram fits in the MAC's RX CDC FIFO (32 words) and pipeline:
    LiteEth then retries 8 times 100 ms apart and drops the datagram. A ping first (its ICMP FIFO
    takes the whole request) warms the table, as :func:`measure_liteeth_latency` does.
    """

    def __init__(self, board, *, sys_clk_freq=None, mac_address=SERVER_MAC,
                 ip_address=SERVER_IP, udp_port=ECHO_PORT, dw=DEFAULT_DW):
        sys_clk_freq = int(sys_clk_freq or board.sys_clk_freq)
        self.board = board
        self.dw = dw
        platform = board.platform()
        self.crg = board.crg(platform, sys_clk_freq)
        SoCMini.__init__(self, platform, sys_clk_freq,
                         ident=f"LiteEth UDP echo on {board.name}", ident_version=False)
        self.ethphy = board.eth_phy(platform)
        self.ethcore = LiteEthUDPIPCore(
            self.ethphy, mac_address=mac_address, ip_address=ip_address, clk_freq=sys_clk_freq,
            dw=dw, with_sys_datapath=dw in (16, 32), tx_cdc_buffered=False,
            rx_cdc_buffered=False)
        port, statements = udp_echo_loopback(self.ethcore.udp, udp_port, dw)
        self.comb += statements

        # LEDs ------------------------------------------------------------------------------
        self.rx_toggle, self.tx_toggle = Signal(), Signal()
        self.sync += [
            If(port.source.valid & port.source.ready & port.source.last,
               self.rx_toggle.eq(~self.rx_toggle)),
            If(port.sink.valid & port.sink.ready & port.sink.last,
               self.tx_toggle.eq(~self.tx_toggle)),
        ]
        try:
            leds = platform.request_all("user_led")
        except Exception:
            return
        beat = Signal(max=sys_clk_freq)
        heartbeat = Signal()
        self.sync += If(beat == 0, beat.eq(sys_clk_freq // 2 - 1),
                        heartbeat.eq(~heartbeat)).Else(beat.eq(beat - 1))
        states = [self.rx_toggle, self.tx_toggle, heartbeat]
        n = min(len(leds), len(states))
        invert = (1 << n) - 1 if board.led_active_low else 0
        self.comb += leds[:n].eq(Cat(*states[:n]) ^ Constant(invert, n))


def build_liteeth_reference(board_name="versa_ecp5", out_dir=None, progress=None, *,
                            dw=DEFAULT_DW, sys_clk_freq=None, seed=1, run_tools=True):
    """Build :class:`LiteEthUdpEchoSoC` for ``board_name`` in ``out_dir`` (default
    ``build/liteeth_ref-<board>``) with the flow of our SoC; returns a
    :class:`~platforms.report.BuildReport` (also written as ``report.json``/``report.md``).
    ``run_tools=False`` stops after writing the Verilog and pin file."""
    from apiary.terminal import StatusLine

    from ..report import BuildReport
    from .boards import LITEX_BOARDS
    from .build import SOC_NAME, run_ecp5_tools, write_soc

    if board_name not in LITEX_BOARDS:
        raise ValueError(f"unknown LiteX board {board_name!r}; one of {', '.join(LITEX_BOARDS)}")
    board = LITEX_BOARDS[board_name]
    progress = progress or StatusLine()
    out_dir = out_dir or os.path.join("build", f"liteeth_ref-{board_name}")
    os.makedirs(out_dir, exist_ok=True)
    times = {}
    start = time.monotonic()
    progress.note(f"soc: LiteEth UDP echo ({dw}-bit LiteEthUDPIPCore) for {board.name} "
                  f"({board.description})")
    soc = write_soc(lambda: LiteEthUdpEchoSoC(board, dw=dw, sys_clk_freq=sys_clk_freq), out_dir,
                    "LiteEth UDP echo")
    times["soc"] = time.monotonic() - start
    report = BuildReport(
        design="LiteEth UDP echo", platform=board.name, flow="litex+yosys+nextpnr",
        device=soc.platform.device, width=dw, out_dir=out_dir,
        parts=[f"LiteEthUDPIPCore (MAC + ARP + IPv4 + ICMP + UDP), {dw}-bit datapath "
               f"({'sys' if dw in (16, 32) else 'eth_rx/eth_tx'} MAC datapath), "
               f"{type(soc.ethphy).__name__}",
               f"UDP echo: port {ECHO_PORT} source looped into its sink, ports swapped",
               f"sys clock {soc.sys_clk_freq / 1e6:g} MHz"],
        notes=[f"'NoC width' is LiteEth's datapath width (dw = {dw})"])
    report.times = times
    if run_tools:
        tools = run_ecp5_tools(os.path.join(out_dir, "gateware"), [f"{SOC_NAME}.v"], board,
                               progress, device=soc.platform.device, seed=seed)
        report.resources, report.clocks, report.bitstream = (tools.resources, tools.clocks,
                                                             tools.bitstream)
        report.seed = tools.seed
        times.update(tools.times)
    report.write()
    return report


# -- latency in migen's simulator ------------------------------------------------------------

class FakePHY:
    """A PHY for LiteEth's MAC that is just its two streams, in ``sys``: ``source`` (frames into
    the MAC) and ``sink`` (frames out of it), ``eth_phy_description(dw)``, frames without
    preamble or FCS, byte ``i`` of a frame in bits ``8i..8i+7`` of its word, ``last_be`` one-hot
    on the last word.

    It tells the MAC (``LiteEthMACCore`` honours all three attributes) that there is no preamble
    or CRC to add or check (``with_preamble_crc = False``), no padding to add
    (``with_padding = False``) and no inter-frame gap to insert
    (``integrated_ifg_inserter = True``). With ``with_sys_datapath=True``, a core width equal to
    the PHY's (no width converter) and the ``eth_rx``/``eth_tx`` domains made ``sys``, what is
    left of the MAC core between this PHY and LiteEth's MAC depacketizer is the ``last_be``
    handling and the clock-domain crossings, which :class:`LiteEthEchoBench` makes wires (as
    LiteEth builds them when both sides are in one domain) unless told to keep the FIFOs.
    """

    with_preamble_crc = False
    with_padding = False
    integrated_ifg_inserter = True

    def __init__(self, dw):
        self.dw = dw
        self.sink = stream.Endpoint(eth_phy_description(dw))
        self.source = stream.Endpoint(eth_phy_description(dw))


@contextlib.contextmanager
def _one_clock_cdc():
    """While constructing: a ``stream.ClockDomainCrossing`` from or to ``eth_rx``/``eth_tx``
    is built as one within ``sys`` (LiteEth's own same-domain case: a wire, or a ``Buffer`` when
    buffered)."""
    original = stream.ClockDomainCrossing

    def same(layout, cd_from="sys", cd_to="sys", **kwargs):
        rename = {"eth_rx": "sys", "eth_tx": "sys"}
        return original(layout, cd_from=rename.get(cd_from, cd_from),
                        cd_to=rename.get(cd_to, cd_to), **kwargs)

    stream.ClockDomainCrossing = same
    try:
        yield
    finally:
        stream.ClockDomainCrossing = original


class LiteEthEchoBench(Module):
    """LiteEth's ``LiteEthUDPIPCore`` (``dw`` bits, all in ``sys``) with the UDP echo loopback of
    :class:`LiteEthUdpEchoSoC` on a :class:`FakePHY` (``self.phy``). ``keep_cdc=True`` keeps
    the MAC core's clock-domain-crossing FIFOs (``AsyncFIFO``s, both sides clocked by ``sys``)
    instead of wires."""

    def __init__(self, dw=64, *, keep_cdc=False, clk_freq=125e6):
        self.dw = dw
        self.phy = FakePHY(dw)
        with contextlib.nullcontext() if keep_cdc else _one_clock_cdc():
            core = LiteEthUDPIPCore(self.phy, mac_address=SERVER_MAC, ip_address=SERVER_IP,
                                    clk_freq=clk_freq, dw=dw, with_sys_datapath=True,
                                    tx_cdc_buffered=False, rx_cdc_buffered=False)
        self.core = core
        self.submodules.core = ClockDomainsRenamer({"eth_rx": "sys", "eth_tx": "sys"})(core)
        self.port, statements = udp_echo_loopback(core.udp, ECHO_PORT, dw)
        self.comb += statements


def _words(frame, dw):
    """``[(data, last_be, last)]``: ``frame`` (bytes) as ``dw``-bit words."""
    nb = dw // 8
    out = []
    for i in range(0, len(frame), nb):
        chunk = frame[i:i + nb]
        last = i + nb >= len(frame)
        out.append((int.from_bytes(chunk, "little"), (1 << (len(chunk) - 1)) if last else 0,
                    int(last)))
    return out


class _Frame:
    def __init__(self, data, first, last, tag=None):
        self.data, self.first, self.last, self.tag = data, first, last, tag


class _Driver:
    """One generator step per cycle: sample both PHY streams, then drive the word to offer on
    the next cycle. Frames queued by :meth:`send` go in back to back (each word as soon as the
    previous one is taken, with no idle cycle between frames); ``phy.sink`` is always ready.
    Frames out of LiteEth are collected in ``sent``; an ARP request for the client's address is
    answered (the reply queued like any other frame), as a host would."""

    def __init__(self, bench):
        self.phy, self.dw = bench.phy, bench.dw
        self.cycle = 0
        self.queue = []          # [[tag, words, next index]]; the head's word is offered
        self.offering = False
        self.taken = {}          # tag -> [cycle first word taken, cycle last word taken]
        self.sent = []           # _Frame, in order, from LiteEth
        self.stalls = 0          # cycles a word was offered and not taken
        self.arp_replies = 0
        self._tx, self._tx_first = [], None

    def send(self, frame, tag):
        self.queue.append([tag, _words(frame, self.dw), 0])

    def _frame_out(self, frame):
        from scapy.layers.inet import ICMP
        from scapy.layers.l2 import ARP, Ether
        pkt = Ether(frame.data)
        if ARP in pkt and pkt[ARP].op == 1 and pkt[ARP].pdst == CLIENT_IP:
            reply = Ether(dst=pkt.src, src=CLIENT_MAC) / ARP(
                op=2, hwsrc=CLIENT_MAC, psrc=CLIENT_IP, hwdst=pkt[ARP].hwsrc, pdst=pkt[ARP].psrc)
            self.send(bytes(reply).ljust(MIN_FRAME, b"\0"), ("arp reply", self.arp_replies))
            self.arp_replies += 1
            frame.tag = "arp request"
        elif ICMP in pkt and pkt[ICMP].type == 0:
            frame.tag = "icmp reply"
        self.sent.append(frame)

    def step(self):
        src, snk = self.phy.source, self.phy.sink
        if self.offering:
            if (yield src.ready):
                head = self.queue[0]
                tag, words, k = head
                if k == 0:
                    self.taken[tag] = [self.cycle, None]
                if k == len(words) - 1:
                    self.taken[tag][1] = self.cycle
                    self.queue.pop(0)
                else:
                    head[2] = k + 1
            else:
                self.stalls += 1
        if (yield snk.valid):
            nb = self.dw // 8
            if self._tx_first is None:
                self._tx_first = self.cycle
            data = yield snk.data
            if (yield snk.last):
                last_be = yield snk.last_be
                n = last_be.bit_length() if last_be else nb
                self._tx.append(data.to_bytes(nb, "little")[:n])
                frame = _Frame(b"".join(self._tx), self._tx_first, self.cycle)
                self._tx, self._tx_first = [], None
                self._frame_out(frame)
            else:
                self._tx.append(data.to_bytes(nb, "little"))
        self.offering = bool(self.queue)
        if self.offering:
            tag, words, k = self.queue[0]
            data, last_be, last = words[k]
            yield src.data.eq(data)
            yield src.last_be.eq(last_be)
            yield src.last.eq(last)
        yield src.valid.eq(int(self.offering))
        yield
        self.cycle += 1

    def run_until(self, done, limit):
        """Step until ``done()`` or ``limit`` more cycles (then :class:`RuntimeError`)."""
        end = self.cycle + limit
        while not done():
            if self.cycle >= end:
                raise RuntimeError(f"LiteEth did not answer within {limit} cycles (cycle "
                                   f"{self.cycle}; frames out so far: {len(self.sent)})")
            yield from self.step()

    def idle(self, cycles):
        for _ in range(cycles):
            yield from self.step()


def udp_request(size, seq, *, sport=None):
    """The ``seq``-th UDP request from the client to LiteEth's port 7 with a ``size``-byte
    payload, padded to 60 bytes (as ``apiary bench`` builds them)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    payload = ((seq & 0xFFFFFFFF).to_bytes(4, "big")
               + bytes((i * 7 + 3) & 0xFF for i in range(max(0, size - 4))))[:size]
    frame = bytes(Ether(dst=_server_mac(), src=CLIENT_MAC)
                  / IP(src=CLIENT_IP, dst=SERVER_IP, id=seq & 0xFFFF)
                  / UDP(sport=sport or 1024 + seq % 1000, dport=ECHO_PORT) / payload)
    return frame.ljust(MIN_FRAME, b"\0")


def check_echo(request, reply):
    """Raise ``AssertionError`` unless ``reply`` (bytes) is the UDP echo of ``request``: MACs,
    IP addresses and UDP ports swapped, same payload, valid IPv4 header checksum, UDP length
    right, UDP checksum valid or 0 (none: LiteEth does not compute it), no padding or trailing
    bytes. Returns the parsed reply (scapy)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    q, r = Ether(request), Ether(reply)
    assert IP in r and UDP in r, f"not a UDP/IPv4 frame: {r!r}"
    assert (r.src, r.dst) == (q.dst, q.src), f"MACs {r.src} -> {r.dst}"
    assert (r[IP].src, r[IP].dst) == (q[IP].dst, q[IP].src), f"IPs {r[IP].src} -> {r[IP].dst}"
    assert (r[UDP].sport, r[UDP].dport) == (q[UDP].dport, q[UDP].sport), "UDP ports"
    payload = bytes(q[UDP].payload)[:q[UDP].len - 8]
    got = bytes(r[UDP].payload)
    assert got[:len(payload)] == payload, "payload differs"
    assert r[UDP].len == 8 + len(payload), f"UDP length {r[UDP].len}"
    assert r[IP].len == 28 + len(payload), f"IP total length {r[IP].len}"
    assert len(reply) == 14 + 28 + len(payload), f"{len(reply)}-byte frame"
    header = reply[14:14 + 4 * r[IP].ihl]
    total = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert total == 0xFFFF, "IPv4 header checksum wrong"
    if r[UDP].chksum:
        again = Ether(reply)
        del again[UDP].chksum
        assert Ether(bytes(again))[UDP].chksum == r[UDP].chksum, "UDP checksum wrong"
    return r


def _run(bench, script):
    """Run ``script(driver)`` (a generator function) on ``bench`` in migen's simulator; returns
    the driver."""
    driver = _Driver(bench)

    def gen():
        yield bench.phy.sink.ready.eq(1)
        yield from script(driver)

    run_simulation(bench, gen())
    return driver


def _server_mac():
    return ":".join(f"{(SERVER_MAC >> (8 * i)) & 0xFF:02x}" for i in reversed(range(6)))


def _warm(driver, budget=5_000):
    """Warm LiteEth's ARP table with a ping from the client: LiteEth's ICMP layer takes the whole
    echo request into its FIFO, its IP layer looks the client up, misses and sends an ARP
    request; the driver answers with an ARP reply, which fills the table and lets the ping reply
    go out.

    Why not otherwise: an ARP request *from* the client is answered but not cached (LiteEth's
    table learns only from replies to its own requests), and a UDP request as warm-up deadlocks
    the direct echo loopback: the request stalls in LiteEth's receive path while its IP TX waits
    for the ARP reply, which is queued behind the rest of that request (LiteEth gives up after 8
    ARP requests 100 ms apart and drops the datagram)."""
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import Ether
    ping = bytes(Ether(dst=_server_mac(), src=CLIENT_MAC) / IP(src=CLIENT_IP, dst=SERVER_IP)
                 / ICMP(type=8, id=1, seq=1) / b"warm").ljust(MIN_FRAME, b"\0")
    driver.send(ping, "ping")
    yield from driver.run_until(lambda: any(f.tag == "icmp reply" for f in driver.sent), budget)
    yield from driver.idle(20)
    tags = [f.tag for f in driver.sent]
    if tags != ["arp request", "icmp reply"] or driver.arp_replies != 1:
        raise RuntimeError(f"warm-up: expected an ARP request and a ping reply, got {tags}")


def measure_liteeth_latency(payload_sizes=(1, 64, 512, 1472), dw=64, *, keep_cdc=False,
                            gap=20):
    """Latency of LiteEth's UDP echo in cycles, one request at a time into the idle core (after
    warming its ARP table, see :func:`_warm`; ``gap`` idle cycles between requests), on a
    :class:`LiteEthEchoBench` of ``dw`` bits in migen's simulator. Every reply is checked
    (:func:`check_echo`).

    Returns ``[{"payload_bytes", "request_bytes", "reply_bytes", "first_in_first_out",
    "first_in_last_out", "last_in_first_out", "rx_stall_cycles"}]``, one per size; cycles are
    from the cycle the request's first word was taken by LiteEth to the cycle the reply's
    first/last word left it (``apiary bench``'s definitions); ``rx_stall_cycles`` counts the
    cycles LiteEth held its PHY-side input not ready while the request was going in.
    """
    bench = LiteEthEchoBench(dw, keep_cdc=keep_cdc)
    rows = []

    def script(driver):
        yield from _warm(driver)
        for seq, size in enumerate(payload_sizes):
            req = udp_request(size, seq)
            before, stalls = len(driver.sent), driver.stalls
            driver.send(req, ("latency", seq))
            yield from driver.run_until(lambda b=before: len(driver.sent) > b, 50_000)
            yield from driver.idle(gap)
            out = driver.sent[before:]
            if len(out) != 1:
                raise RuntimeError(f"{size}-byte request: {len(out)} frames out")
            check_echo(req, out[0].data)
            first, last = driver.taken[("latency", seq)]
            rows.append({"payload_bytes": size, "request_bytes": len(req),
                         "reply_bytes": len(out[0].data),
                         "first_in_first_out": out[0].first - first,
                         "first_in_last_out": out[0].last - first,
                         "last_in_first_out": out[0].first - last,
                         "rx_stall_cycles": driver.stalls - stalls})

    _run(bench, script)
    return rows


def measure_liteeth_throughput(size=64, packets=50, dw=64, *, keep_cdc=False):
    """``packets`` requests with ``size``-byte payloads queued at once and offered back to back
    (each word as soon as LiteEth takes the previous one). Returns ``{"payload_bytes",
    "packets", "cycles_per_packet"`` (first request's first word in to the last reply's last
    word out, / ``packets``), ``"cycles_per_packet_out"`` (``apiary bench``'s measure: last
    word of the last reply − last word of the first reply, / (packets − 1)),
    ``"offered_cycles_per_packet"`` (spacing of the requests' first words as taken),
    ``"words_in"``, ``"rx_stall_cycles"``}``. Every reply is checked."""
    bench = LiteEthEchoBench(dw, keep_cdc=keep_cdc)
    result = {}

    def script(driver):
        yield from _warm(driver)
        reqs = [udp_request(size, seq) for seq in range(packets)]
        before, stalls = len(driver.sent), driver.stalls
        for seq, req in enumerate(reqs):
            driver.send(req, ("burst", seq))
        yield from driver.run_until(lambda: len(driver.sent) >= before + packets,
                                    2000 * packets)
        out = driver.sent[before:]
        for req, rep in zip(reqs, out):
            check_echo(req, rep.data)
        firsts = [driver.taken[("burst", k)][0] for k in range(packets)]
        result.update({
            "payload_bytes": size, "packets": packets, "dw": dw,
            "words_in": -(-len(reqs[0]) // (dw // 8)),
            "cycles_per_packet": (out[-1].last - firsts[0]) / packets,
            "cycles_per_packet_out": (out[-1].last - out[0].last) / (packets - 1),
            "offered_cycles_per_packet": (firsts[-1] - firsts[0]) / (packets - 1),
            "rx_stall_cycles": driver.stalls - stalls})

    _run(bench, script)
    return result


# -- our design, measured the same way --------------------------------------------------------

def measure_ours(design_path="examples/udp_echo.py", payload_sizes=(1, 64, 512, 1472),
                 width=64):
    """Our design's latency at the same sizes, by ``apiary bench``'s own
    :func:`harness.bench.echo.measure_latency` (Verilator; one request per size into the idle
    design, replies checked against ``beehive.model.echo_reply``). Returns rows like
    :func:`measure_liteeth_latency`'s (without ``rx_stall_cycles``: our ``mac_rx`` is never
    back-pressured)."""
    from harness.bench.echo import measure_latency
    from beehive.proto.addresses import design_addresses
    from apiary.load import load_design
    from apiary.sim import open_sim

    design = load_design(design_path, width=width)
    mac, ipv4 = design_addresses(design)
    rows = []
    with open_sim(design, "verilator") as sim:
        for size in payload_sizes:
            r = measure_latency(sim, mac, ipv4, size=size, requests=1)
            rows.append({"payload_bytes": size, "request_bytes": r["request_bytes"],
                         "reply_bytes": r["reply_bytes"],
                         "first_in_first_out": r["first_in_first_out"]["min"],
                         "first_in_last_out": r["first_in_last_out"]["min"],
                         "last_in_first_out": r["last_in_first_out"]["min"]})
    return rows


# -- output and command line -------------------------------------------------------------------

def render_latency(results, markdown=False):
    """``results``: ``{"liteeth": {dw: rows}, "ours": rows or None, "throughput": dict or
    None}`` → a table (Markdown or aligned text)."""
    liteeth, ours = results["liteeth"], results.get("ours")
    sizes = [r["payload_bytes"] for r in next(iter(liteeth.values()))]
    header = ["UDP payload (B)", "frame in / out (B)"]
    for dw in liteeth:
        header += [f"LiteEth {dw}-bit first→first", f"LiteEth {dw}-bit first→last",
                   f"LiteEth {dw}-bit input stalls"]
    if ours:
        header += ["ours 64-bit first→first", "ours 64-bit first→last"]
    rows = []
    for k, size in enumerate(sizes):
        first = next(iter(liteeth.values()))[k]
        row = [str(size), f"{first['request_bytes']} / {first['reply_bytes']}"]
        for rs in liteeth.values():
            row += [str(rs[k]["first_in_first_out"]), str(rs[k]["first_in_last_out"]),
                    str(rs[k]["rx_stall_cycles"])]
        if ours:
            o = next(r for r in ours if r["payload_bytes"] == size)
            row += [str(o["first_in_first_out"]), str(o["first_in_last_out"])]
        rows.append(row)
    lines = []
    title = ("UDP echo latency in cycles, one request at a time into the idle core (first word "
             "of the request in → first / last word of the reply out)")
    if markdown:
        lines += [title + ".", "", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---:" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines += [title, "  ".join(h.rjust(w) for h, w in zip(header, widths))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    t = results.get("throughput")
    if t:
        lines += ["", f"LiteEth {t['dw']}-bit, {t['packets']} back-to-back "
                      f"{t['payload_bytes']}-byte echoes ({t['words_in']} words each): "
                      f"{t['cycles_per_packet']:.2f} cycles/packet (first request's first word "
                      f"in → last reply's last word out, / {t['packets']}); "
                      f"{t['cycles_per_packet_out']:.2f} between replies' last words (apiary "
                      f"bench's measure); requests taken every "
                      f"{t['offered_cycles_per_packet']:.2f} cycles; input stalled "
                      f"{t['rx_stall_cycles']} cycles."]
    return "\n".join(lines) + "\n"


def _sizes(text):
    return tuple(int(s) for s in text.split(",") if s)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m platforms.litex_soc.liteeth_ref",
        description="LiteEth's UDP/IP core doing UDP echo: the reference to compare our stack "
                    "with (area/Fmax on a LiteX board, latency in cycles).")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build LiteEthUdpEchoSoC (Yosys, nextpnr, ecppack) and "
                                     "print the report")
    b.add_argument("--board", default="versa_ecp5")
    b.add_argument("-o", "--output", default=None,
                   help="build directory (default: build/liteeth_ref-<board>)")
    b.add_argument("--dw", type=int, default=DEFAULT_DW, help="LiteEth datapath width "
                   f"(default {DEFAULT_DW}, as liteeth_gen)")
    b.add_argument("--no-run", action="store_true",
                   help="write the Verilog and pin file only")
    lat = sub.add_parser("latency", help="measure LiteEth's echo latency in migen's simulator")
    lat.add_argument("--dw", type=_sizes, default=(64, 8), metavar="W,W",
                     help="datapath widths (default 64,8)")
    lat.add_argument("--sizes", type=_sizes, default=(1, 64, 512, 1472), metavar="B,B,...")
    lat.add_argument("--packets", type=int, default=50,
                     help="back-to-back 64-byte echoes for cycles/packet at the first width "
                          "(0: skip)")
    lat.add_argument("--keep-cdc", action="store_true",
                     help="keep the MAC core's CDC FIFOs (AsyncFIFOs in one clock)")
    lat.add_argument("--ours", metavar="DESIGN", default=None,
                     help="also measure DESIGN (e.g. examples/udp_echo.py) at 64 bits with "
                          "Verilator, the way apiary bench does")
    lat.add_argument("--markdown", action="store_true")
    lat.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "build":
        from ..flow import BuildFailed
        try:
            report = build_liteeth_reference(args.board, args.output, dw=args.dw,
                                             run_tools=not args.no_run)
        except (BuildFailed, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(report.markdown(), end="")
        return 0

    results: dict[str, Any] = {"liteeth": {}, "ours": None, "throughput": None}
    for dw in args.dw:
        t = time.monotonic()
        results["liteeth"][dw] = measure_liteeth_latency(args.sizes, dw, keep_cdc=args.keep_cdc)
        print(f"LiteEth {dw}-bit latency measured in {time.monotonic() - t:.0f} s",
              file=sys.stderr)
    if args.packets:
        t = time.monotonic()
        results["throughput"] = measure_liteeth_throughput(64, args.packets, args.dw[0],
                                                           keep_cdc=args.keep_cdc)
        print(f"LiteEth throughput measured in {time.monotonic() - t:.0f} s", file=sys.stderr)
    if args.ours:
        results["ours"] = measure_ours(args.ours, args.sizes)
    if args.json:
        import json
        print(json.dumps({**results, "liteeth": {str(k): v for k, v in results["liteeth"].items()}},
                         indent=2))
    else:
        print(render_latency(results, markdown=args.markdown), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
