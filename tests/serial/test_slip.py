"""IP over a serial line (beehive/proto/uart.py, beehive/proto/slip.py, examples/slip_echo.py),
on Amaranth's simulator, against a Python model of the line: every pin is driven and read bit
by bit, at a few clock cycles per bit so that whole datagrams stay quick to simulate.

* The UART: a round trip of all 256 byte values, back to back, and each end against the Python
  line model, bit for bit; framing errors and overruns are counted and cost nothing else.
* SLIP receive and transmit on their own, at 64 and 512 bits: escapes of 0xC0 and 0xDB,
  back-to-back ENDs, a bad escape and an oversized frame dropped and counted with the next frame
  still delivered, every length around a word boundary.
* The whole design: UDP echo and ping through the Beehive stack, replies equal to the model's
  (:func:`beehive.model.echo_reply`, on the datagram wrapped in an Ethernet header and
  stripped again), payloads full of 0xC0 and 0xDB, and a datagram with a bad checksum dropped
  and counted while the good one behind it is still echoed.
"""

import pathlib
import random

import pytest
from amaranth import Module
from amaranth.sim import Simulator
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.noc.header import Message, NocHeader
from beehive.proto.messages import MsgType
from apiary.noc.spec import message_flits, message_from_flits
from apiary.noc.testbench import recv_message
from apiary.stream.testbench import simulate, stream_get, stream_put
from apiary.tile import Endpoint, TileEnv
from apiary.top import DesignTop
from beehive.model import echo_reply
from beehive.proto.addresses import DEFAULT_MAC
from beehive.proto.messages import meta_from_words, meta_to_words
from beehive.serial.slip import (END, ESC, ESC_END, ESC_ESC, SlipRxTile, SlipTxTile,
                                slip_decode, slip_encode)
from beehive.serial.uart import UartRx, UartTx, baud_divisor

ROOT = pathlib.Path(__file__).resolve().parents[2]
BAUD = 115200
DIV = 4                                  # clock cycles per bit in these tests
PEER_IP, IPV4 = "10.0.0.1", "10.0.0.2"


# -- the Python line model --------------------------------------------------------------------

def uart_bits(data, stop=1):
    """The line levels of ``data`` sent 8N1, one per bit time (``stop`` is the stop bit)."""
    bits = []
    for b in bytes(data):
        bits += [0] + [(b >> k) & 1 for k in range(8)] + [stop]
    return bits


async def drive_line(ctx, pin, bits, divisor=DIV):
    """Hold each level of ``bits`` on ``pin`` for ``divisor`` cycles, then leave it idle."""
    for bit in bits:
        ctx.set(pin, bit)
        await ctx.tick().repeat(divisor)
    ctx.set(pin, 1)


def line_reader(pin, out, divisor=DIV):
    """A background testbench that decodes 8N1 bytes from ``pin`` into the list ``out``,
    sampling mid-bit (``divisor // 2`` cycles after a falling edge is seen, then every
    ``divisor``), and fails on a start bit that does not last or a stop bit that is not 1."""
    async def tb(ctx):
        # One sample per cycle, no `until`: a background testbench is abandoned mid-wait when
        # the simulation ends, and `until` then complains while it is garbage-collected.
        since = None                # cycles since the start bit's falling edge was seen
        bits = []
        async for _, _, level in ctx.tick().sample(pin):
            if since is None:
                if level == 0:
                    since, bits = 0, []
                continue
            since += 1
            if since % divisor == divisor // 2:
                bits.append(level)
                if len(bits) == 10:
                    assert bits[0] == 0, "a start bit shorter than half a bit"
                    assert bits[9] == 1, "a stop bit that is not 1"
                    out.append(sum(b << k for k, b in enumerate(bits[1:9])))
                    since = None
    return tb


def flit_collector(port, messages, width):
    """A background testbench that takes every flit on ``port`` (always ready) and appends
    each whole message to ``messages``."""
    async def tb(ctx):
        ctx.set(port.ready, 1)
        flits = []
        async for _, _, valid, data, last in ctx.tick().sample(port.valid, port.payload.data,
                                                                port.payload.last):
            if valid:
                flits.append((int(data), int(last)))
                if last:
                    messages.append(message_from_flits(flits, width))
                    flits = []
    return tb


# -- the UART -----------------------------------------------------------------------------------

def uart_loop(divisor):
    m = Module()
    m.submodules.tx = tx = UartTx(divisor)
    m.submodules.rx = rx = UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    return m, tx, rx


@pytest.mark.parametrize("divisor", [4])
def test_uart_round_trip_of_every_byte_back_to_back(divisor):
    m, tx, rx = uart_loop(divisor)
    values = list(range(256))
    got, starts = [], []

    async def send(ctx):
        for v in values:
            await stream_put(ctx, tx.i, v)

    async def watch_ready(ctx):
        cycle = 0
        async for _, _, valid, ready in ctx.tick().sample(tx.i.valid, tx.i.ready):
            if valid and ready:
                starts.append(cycle)
            cycle += 1

    async def recv(ctx):
        for _ in values:
            got.append(int(await stream_get(ctx, rx.o)))
        assert ctx.get(rx.framing_errors) == 0 and ctx.get(rx.overrun) == 0

    simulate(m, send, recv, background=[watch_ready], timeout=260 * 10 * divisor)
    assert got == values
    # Back to back: a byte every 10 bit times, no idle time on the line.
    assert {b - a for a, b in zip(starts, starts[1:])} == {10 * divisor}


def test_uart_tx_against_the_line_model():
    tx = UartTx(DIV)
    data = bytes([0x00, 0xFF, 0x55, 0xAA, 0xC0, 0x01, 0x80])
    out = []

    async def send(ctx):
        assert ctx.get(tx.tx) == 1                      # idle high after reset
        for b in data:
            await stream_put(ctx, tx.i, b)
        await ctx.tick().repeat(12 * DIV)

    simulate(tx, send, background=[line_reader(tx.tx, out)])
    assert bytes(out) == data


def test_uart_rx_framing_error_and_overrun_are_counted():
    rx = UartRx(DIV)
    got = []

    async def bench(ctx):
        # A byte whose stop bit is 0 is dropped and counted; the next one is received.
        await drive_line(ctx, rx.rx, uart_bits(b"\x5a", stop=0) + [1, 1] + uart_bits(b"\x33"))
        await ctx.tick().repeat(3 * DIV)
        assert ctx.get(rx.framing_errors) == 1
        got.append(int(await stream_get(ctx, rx.o)))
        # A break (line low for a long time) is one framing error, then bytes again.
        await drive_line(ctx, rx.rx, [0] * 30 + [1] + uart_bits(b"\x44"))
        await ctx.tick().repeat(3 * DIV)
        assert ctx.get(rx.framing_errors) == 2
        got.append(int(await stream_get(ctx, rx.o)))
        # Two bytes while nobody takes them: the first is held, the second dropped.
        await drive_line(ctx, rx.rx, uart_bits(b"\x11\x22"))
        await ctx.tick().repeat(3 * DIV)
        assert ctx.get(rx.overrun) == 1
        got.append(int(await stream_get(ctx, rx.o)))
        await ctx.tick().repeat(2)
        assert ctx.get(rx.o.valid) == 0
        # A glitch shorter than half a bit is not a start bit.
        await drive_line(ctx, rx.rx, [0], divisor=1)
        await ctx.tick().repeat(12 * DIV)
        assert ctx.get(rx.o.valid) == 0 and ctx.get(rx.framing_errors) == 2

    simulate(rx, bench, timeout=2000)
    assert got == [0x33, 0x44, 0x11]


def test_uart_rx_takes_a_sender_a_few_percent_off():
    """Sampling mid-bit leaves half a bit of margin over a byte: 3 % fast or slow is fine."""
    for divisor, sender in ((15, 14.5), (15, 15.5)):
        rx = UartRx(divisor)
        got = []
        data = bytes(range(0, 256, 17))

        async def bench(ctx, rx=rx, got=got, data=data, sender=sender):
            t = 0.0
            for bit in uart_bits(data):
                ctx.set(rx.rx, bit)
                t += sender
                await ctx.tick().repeat(round(t) - round(t - sender))
            ctx.set(rx.rx, 1)
            await ctx.tick().repeat(20)

        async def recv(ctx, rx=rx, got=got):
            ctx.set(rx.o.ready, 1)
            async for _, _, valid, byte in ctx.tick().sample(rx.o.valid, rx.o.payload):
                if valid:
                    got.append(byte)

        simulate(rx, bench, background=[recv])
        assert bytes(got) == data


def test_baud_divisor():
    assert baud_divisor(12_000_000, 115200) == 104
    assert baud_divisor(BAUD * DIV, BAUD) == DIV
    with pytest.raises(ValueError, match="at least 4"):
        baud_divisor(300_000, 115200)
    with pytest.raises(ValueError, match="closer"):
        baud_divisor(1_000_000, 115200)           # 8.68 cycles per bit: 9 is 3.5 % slow
    with pytest.raises(ValueError, match="clock_hz"):
        SlipRxTile(TileEnv(width=64))             # the design must say how fast its clock is
    assert SlipTxTile(slip_env(64), baud=BAUD).divisor == DIV


# -- SLIP on its own ----------------------------------------------------------------------------

def slip_env(width, name="slip", **settings):
    return TileEnv(name=name, width=width, routes={"data": {0x0800: [Endpoint("ip_rx", 1, 0)]}},
                   settings={"clock_hz": BAUD * DIV, **settings})


def test_slip_model():
    data = bytes([1, END, 2, ESC, 3])
    assert slip_encode(data) == bytes([END, 1, ESC, ESC_END, 2, ESC, ESC_ESC, 3, END])
    assert slip_decode(slip_encode(data) * 2) == ([data, data], 0)
    assert slip_decode(bytes([END, END, 5, ESC, 7, 6, END, 9, END])) == ([b"\x09"], 1)


@pytest.mark.parametrize("width", [64, 512])
def test_slip_rx_decodes_escapes_and_drops_bad_frames(width):
    nb = width // 8
    rng = random.Random(width)
    most = nb + 2                                       # max_packet: frames span 2 words
    good = [
        bytes([END]),                                   # one escaped END
        bytes([ESC]),
        bytes([END, ESC, ESC_END, ESC_ESC, END, END, ESC, ESC]),
        rng.randbytes(nb),                              # exactly one word
        bytes(rng.choice([END, ESC, 0, 0xFF]) for _ in range(nb + 1)),
        bytes(most),                                    # exactly max_packet: kept
        rng.randbytes(nb - 1),
    ]
    line = b"".join(slip_encode(p) for p in good[:3])
    line += bytes([END, END, END])                       # empty frames: ignored, not counted
    line += bytes([END, 1, 2, ESC, 0x41, 3, 4, END])     # bad escape: dropped...
    line += slip_encode(good[3])                         # ...and the next frame is fine
    line += bytes(range(1, nb + 2)) + bytes([ESC, 7, 8, END])   # a bad escape after a word
    line += bytes([5, ESC, END])                         # ESC END is a bad escape too
    line += slip_encode(good[4])
    line += slip_encode(bytes(most + 1))                 # over max_packet: dropped...
    line += slip_encode(good[5])                         # ...and the next frame is fine
    line += slip_encode(good[6])[1:]                     # no opening END: still a frame
    tile = SlipRxTile(slip_env(width), baud=BAUD, max_packet=most)
    messages, counts = [], {}

    async def drive(ctx):
        await drive_line(ctx, tile.uart_rx, uart_bits(line))
        await ctx.tick().repeat(200)
        for name in ("forwarded", "no_route", "bad_escape", "oversized", "no_room",
                     "framing_errors"):
            counts[name] = ctx.get(getattr(tile.counters, name))

    simulate(tile, drive, background=[flit_collector(tile.noc_out, messages, width)])
    assert slip_decode(line)[1] == 3
    assert [msg.payload for msg in messages] == good
    assert counts == {"forwarded": len(good), "no_route": 0, "bad_escape": 3,
                      "oversized": 1, "no_room": 0, "framing_errors": 0}
    for msg in messages:
        assert msg.header.msg_type == MsgType.ETH_RX_FRAME.value
        assert (msg.header.dst_x, msg.header.dst_y) == (1, 0)
        meta = meta_from_words(msg.meta, width) if width < 512 else None
        if meta is not None:
            assert meta["ethertype"] == 0x0800 and meta["peer_mac"] == 0


def test_slip_rx_counts_frames_it_has_no_room_for():
    """A stalled NoC: once the buffer and the tile's queues behind it are full, whole frames are
    dropped and counted in ``no_room``; every frame is either delivered intact, in order, or
    counted, and frames get through again once the NoC moves."""
    width = 64
    tile = SlipRxTile(slip_env(width), baud=BAUD, max_packet=16, buffer_bytes=16, max_queued=2)
    frames = [bytes([k]) * 10 for k in range(1, 13)]
    late = b"after the stall"
    messages, counts = [], {}

    async def drive(ctx):
        await drive_line(ctx, tile.uart_rx, uart_bits(b"".join(slip_encode(f) for f in frames)))
        await ctx.tick().repeat(50)
        counts["stalled"] = ctx.get(tile.counters.no_room)
        while ctx.get(tile.noc_out.valid):
            messages.append(await recv_message(ctx, tile.noc_out, width))
            await ctx.tick().repeat(10)
        await drive_line(ctx, tile.uart_rx, uart_bits(slip_encode(late)))
        messages.append(await recv_message(ctx, tile.noc_out, width))
        counts["no_room"] = ctx.get(tile.counters.no_room)
        counts["forwarded"] = ctx.get(tile.counters.forwarded)

    simulate(tile, drive, timeout=20_000)
    got = [m.payload for m in messages]
    assert got[-1] == late
    delivered = got[:-1]
    assert delivered == frames[:len(delivered)]       # the first frames, whole, in order
    assert counts["stalled"] >= 1
    assert counts["no_room"] == counts["stalled"] == len(frames) - len(delivered)
    assert counts["forwarded"] == len(got)


@pytest.mark.parametrize("width", [64, 512])
def test_slip_tx_escapes_and_frames_every_message(width):
    nb = width // 8
    rng = random.Random(width + 1)
    payloads = [b"", bytes([END]), bytes([ESC]), bytes([END, ESC, ESC_END, ESC_ESC]) * 3,
                rng.randbytes(nb), bytes(rng.choice([END, ESC, 7]) for _ in range(nb + 1)),
                rng.randbytes(2 * nb + 5)]
    tile = SlipTxTile(slip_env(width), baud=BAUD)
    line = []
    meta = meta_to_words(width, ethertype=0x0800)

    async def send(ctx):
        for p in payloads:
            msg = Message(NocHeader(msg_type=MsgType.ETH_TX_FRAME.value), meta, p)
            for data, last in message_flits(msg, width):
                await stream_put(ctx, tile.noc_in, {"data": data, "last": last})
        expected = sum(len(slip_encode(p)) for p in payloads)
        while len(line) < expected:
            await ctx.tick().repeat(10 * DIV)
        await ctx.tick().repeat(20 * DIV)
        assert ctx.get(tile.counters.forwarded) == len(payloads)

    simulate(tile, send, background=[line_reader(tile.uart_tx, line)])
    assert bytes(line) == b"".join(slip_encode(p) for p in payloads)


# -- the whole design ---------------------------------------------------------------------------

def slip_design(**overrides):
    return load_design(str(ROOT / "examples" / "slip_echo.py"), clock_hz=BAUD * DIV, baud=BAUD,
                       **overrides)


def udp(payload, sport=40000, dport=7, **ip):
    return IP(src=PEER_IP, dst=IPV4, **ip) / UDP(sport=sport, dport=dport) / payload


def ping(payload=b"abcdefgh", seq=1):
    return IP(src=PEER_IP, dst=IPV4) / ICMP(id=0x4242, seq=seq) / payload


def model(datagram):
    """``(reply datagram or None, counter)`` from the Ethernet model of the echo stack."""
    reply, counter = echo_reply(bytes(Ether(dst=DEFAULT_MAC, src="52:54:00:12:34:56", type=0x0800)
                                      / datagram), ipv4=IPV4)
    return (None if reply is None else reply[14:]), counter


def exchange(datagrams, extra_cycles=3000, **overrides):
    """Send ``datagrams`` (bytes, SLIP-encoded back to back) into the design's pin; return the
    datagrams decoded from its output pin and the top level's counters."""
    top = DesignTop(slip_design(**overrides))
    expected_replies = sum(model(d)[0] is not None for d in datagrams)
    line, counters = [], {}

    async def drive(ctx):
        await drive_line(ctx, top.slip_rx_uart_rx,
                         uart_bits(b"".join(slip_encode(d) for d in datagrams)))
        waited = 0
        while len(slip_decode(line)[0]) < expected_replies and waited < extra_cycles:
            await ctx.tick().repeat(10 * DIV)
            waited += 10 * DIV
        await ctx.tick().repeat(30 * DIV)
        for name in top.bank.names:
            counters[name] = ctx.get(getattr(top.counters, name))

    sim = Simulator(top)
    sim.add_clock(1 / (BAUD * DIV))
    sim.add_testbench(line_reader(top.slip_tx_uart_tx, line), background=True)
    sim.add_testbench(drive)
    sim.run()
    frames, bad = slip_decode(line)
    assert bad == 0
    return frames, counters


def test_design_is_checked():
    design = slip_design()
    design.check()
    assert design.settings == {"ipv4": IPV4, "clock_hz": BAUD * DIV}
    assert (design.cols, design.rows, design.width) == (4, 2, 64)
    from apiary.cli import main
    assert main(["check", str(ROOT / "examples" / "slip_echo.py")]) == 0


@pytest.mark.slow
def test_udp_echo_and_ping_over_slip():
    """UDP to port 7 and ping, with payloads full of END and ESC bytes, replies equal to the
    model's; a UDP datagram with a bad checksum is dropped and counted, and the one behind it
    echoed."""
    bad = bytearray(bytes(udp(b"x", sport=1111)))
    bad[-1] ^= 0x01                                     # the UDP checksum no longer matches
    datagrams = [
        bytes(udp(bytes([END, ESC, ESC_END]) + b"hi", sport=2222)),
        bytes(ping(bytes([ESC, END]), seq=2)),
        bytes(bad),
        bytes(udp(b"ok", sport=3333)),
    ]
    results = [model(d) for d in datagrams]
    replies = [r for r, _ in results if r is not None]
    assert [c for _, c in results] == ["udp_rx_forwarded", "icmp_forwarded",
                                       "udp_rx_bad_checksum", "udp_rx_forwarded"]
    got, counters = exchange(datagrams)
    assert got == replies
    for reply in got:
        ip = IP(reply)
        assert ip.ttl == 64 and ip.src == IPV4 and ip.dst == PEER_IP
    assert counters["slip_rx_forwarded"] == 4
    assert counters["udp_rx_bad_checksum"] == 1
    assert counters["udp_rx_forwarded"] == 2 and counters["icmp_forwarded"] == 1
    assert counters["slip_tx_forwarded"] == 3
    assert counters["slip_rx_bad_escape"] == counters["slip_rx_framing_errors"] == 0
