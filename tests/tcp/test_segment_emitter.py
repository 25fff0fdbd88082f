"""SegmentEmitter (beehive/proto/tcp/tx.py) alone, at 64 and 512 bits: segments with and
without data (the data as the send buffer returns it), in order, under random stalls; each
leaves as an IP_TX_DATAGRAM to IPv4 TX whose bytes are its header, checksum filled (checked
against the pseudo-header), then its data; ``sent`` counts the segments, ``load_done`` the data
segments; a segment without data is offered 2 cycles after it is queued."""

import random

import pytest
from scapy.layers.inet import TCP

from apiary.noc.framing import MessageSender
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import recv_packet, send_packet, simulate, stream_get, stream_put
from beehive.proto.messages import PACKET_META, MsgType
from beehive.proto.tcp.tx import SegmentEmitter

LOCAL_IP, PEER_IP = 0x0A00_0002, 0x0A00_0001


def emitter(width):
    return SegmentEmitter(width, max_bytes=1460, depth=4, local_ip=LOCAL_IP, dst=(1, 1, 0),
                          src=(3, 1, 0), descriptor=MessageSender.descriptor_layout(
                              width, meta_bits=PACKET_META.size, short_meta=True))


def segment(header, data_len):
    """The engine's request for ``header`` (bytes, checksum zero) and ``data_len`` bytes."""
    return {"peer_mac": 0x02_00_00_00_00_01, "vlan": 0, "vlan_tci": 0, "peer_ip": PEER_IP,
            "header": int.from_bytes(header, "little"), "header_len": len(header),
            "data_len": data_len, "has_data": data_len != 0}


def checksum_ok(tcp_bytes):
    pseudo = (LOCAL_IP.to_bytes(4, "big") + PEER_IP.to_bytes(4, "big")
              + bytes([0, 6]) + len(tcp_bytes).to_bytes(2, "big"))
    return ones_complement_sum(pseudo + tcp_bytes) == 0xFFFF


@pytest.mark.parametrize("width", [64, 512])
def test_segments_leave_with_their_checksums_and_data(width):
    rng = random.Random(width)
    dut = emitter(width)
    cases = []
    for k in range(10):
        data = rng.randbytes(rng.randrange(1, 400)) if k % 3 else b""
        syn = k == 0
        opts = [("MSS", 1460), ("NOP", None), ("WScale", 7)] if syn else []
        header = bytes(TCP(sport=7, dport=40000, seq=rng.getrandbits(32),
                           flags="S" if syn else "PA", options=opts, chksum=0))
        cases.append((header, data))
    descs, out, pulses = [], [], {"sent": 0, "load_done": 0}

    async def engine(ctx):
        for header, data in cases:
            await stream_put(ctx, dut.segments, segment(header, len(data)), rng=rng, stall=0.3)

    async def memory(ctx):
        for _, data in cases:
            if data:
                await send_packet(ctx, dut.data, data, width, rng=rng, stall=0.2)

    async def sender(ctx):
        for _ in cases:
            d = await stream_get(ctx, dut.o_hdr, rng=rng, stall=0.3)
            meta = PACKET_META.unpack(int(d.meta))
            descs.append((d.msg_type, d.dst_x, d.dst_y, d.src_x, d.payload_bytes,
                          meta["peer_ip"], meta["local_ip"], meta["protocol"]))

    async def data(ctx):
        for _ in cases:
            out.append(await recv_packet(ctx, dut.o_data, width, rng=rng, stall=0.3))

    async def count(ctx):
        async for _, _, sent, done in ctx.tick().sample(dut.sent, dut.load_done):
            pulses["sent"] += sent
            pulses["load_done"] += done

    simulate(dut, sender, data, background=[engine, memory, count], timeout=50_000)
    assert descs == [(MsgType.IP_TX_DATAGRAM.value, 1, 1, 3, len(h) + len(d), PEER_IP, LOCAL_IP,
                      6) for h, d in cases]
    for (header, payload), got in zip(cases, out):
        assert got[:16] == header[:16] and got[18:len(header)] == header[18:]
        assert got[len(header):] == payload
        assert checksum_ok(got)
    assert pulses == {"sent": len(cases), "load_done": sum(1 for _, d in cases if d)}


def test_a_segment_without_data_is_offered_two_cycles_after():
    dut = emitter(64)
    header = bytes(TCP(flags="A", chksum=0))

    async def bench(ctx):
        ctx.set(dut.segments.payload, segment(header, 0))
        ctx.set(dut.segments.valid, 1)
        offered = []
        for _ in range(4):
            offered.append(ctx.get(dut.o_hdr.valid))
            await ctx.tick()
            ctx.set(dut.segments.valid, 0)
        assert offered == [0, 0, 1, 1]

    simulate(dut, bench, timeout=50)
