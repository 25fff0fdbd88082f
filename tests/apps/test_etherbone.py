"""Etherbone on the controller (beehive/apps/etherbone.py, beehive/apps/controller.py) alone, with
the testbench of test_controller.py playing the control agents: packets built and replies read
with LiteX's own Etherbone code (litex.tools.remote.etherbone), at 64 and 512 bits, beside
requests in the controller's own format. Every control message and every reply is checked
against a model; malformed packets are dropped unanswered and counted, and the next good one is
served. The csr.csv that `apiary ctl DESIGN csr` writes is read with LiteX's CSRBuilder."""

import pathlib
import random
import struct
import sys
from types import SimpleNamespace

import pytest
from litex.tools.remote.csr_builder import CSRBuilder
from litex.tools.remote.etherbone import (EtherbonePacket, EtherboneReads, EtherboneRecord,
                                          EtherboneWrites)

from apiary.control.addrmap import DesignMap, TileMap
from apiary.control.messages import CtlMsgType, CtlStatus
from apiary.stream.checksum import ones_complement_sum
from beehive.apps import etherbone as eb
from beehive.apps.controller import STATUS_BAD_REQUEST, parse_reply, read_request, write_request
from apiary.stream.counters import CounterSignature
from apiary.stream.registers import Register, RegisterSignature, Table
from beehive.proto.messages import PACKET_META

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_controller import CTL, SILENT, UDP_TX, Agents, run  # noqa: E402

READ, WRITE = CtlMsgType.CTL_READ.value, CtlMsgType.CTL_WRITE.value


def meta(rng, port=eb.ETHERBONE_PORT, protocol=17):
    fields = {n: rng.getrandbits(PACKET_META.width(n)) for n in PACKET_META.names}
    return dict(fields, local_port=port, protocol=protocol)


def litex_read(addrs, base_ret):
    """A read packet as LiteX's CommUDP.read builds it."""
    record = EtherboneRecord(addr_size=4)
    record.reads = EtherboneReads(addr_size=4, addrs=list(addrs))
    record.rcount = len(record.reads)
    record.reads.base_ret_addr = base_ret
    packet = EtherbonePacket(addr_width=32)
    packet.records = [record]
    packet.encode()
    return bytes(packet.bytes)


def litex_write(base, words):
    """A write packet as LiteX's CommUDP.write builds it."""
    record = EtherboneRecord(addr_size=4)
    record.writes = EtherboneWrites(addr_size=4, base_addr=base, datas=iter(words))
    record.wcount = len(record.writes)
    packet = EtherbonePacket(addr_width=32)
    packet.records = [record]
    packet.encode()
    return bytes(packet.bytes)


def litex_probe():
    packet = EtherbonePacket(addr_width=32)
    packet.pf = 1
    packet.encode()
    return bytes(packet.bytes) + bytes(4)


def serve(agents, packet):
    """What the controller must do with an Etherbone ``packet``: ``(reply or None, control
    messages)``, applying its writes to ``agents``."""
    if packet[2] & eb.PROBE:
        return bytes([0x4E, 0x6F, eb.VERSION | eb.PROBE_REPLY, eb.SIZES, 0, 0, 0, 0]), []
    _, _, wcount, rcount, base = struct.unpack_from("!BBBBI", packet, 8)
    words = struct.unpack_from(f"!{wcount + rcount}I", packet, eb.HEAD_BYTES)
    sent, values = [], []
    for j, word in enumerate(words):
        x, y, addr = eb.target(word if rcount else base + 4 * j)
        kind = READ if rcount else WRITE
        sent.append((kind, (x, y), addr, 0 if rcount else word))
        answer = agents.answer((x, y), kind, addr, 0 if rcount else word)
        if answer is None or answer[0] != CtlStatus.OK:
            break
        values.append(answer[1])
    if not rcount:
        return None, sent
    values += [0] * (rcount - len(values))
    return eb.read_packet([], 0)[:8] + struct.pack("!BBBBI", 0, 0x0F, rcount, 0, base) + \
        b"".join(struct.pack("!I", v) for v in values), sent


def check(replies, ctl, requests, agents):
    """Replies (only to reads and probes, and to the controller's own requests) and control
    messages are the model's."""
    want_replies, want_ctl = [], []
    for payload, req_meta in requests:
        if req_meta["local_port"] == eb.ETHERBONE_PORT:
            reply, sent = serve(agents, payload)
        else:
            reply, sent = agents.serve(payload)
        want_ctl += sent
        if reply is not None:
            want_replies.append((reply, req_meta))
    assert [p for _, _, p in replies] == [r for r, _ in want_replies]
    for (header, got_meta, payload), (_, req_meta) in zip(replies, want_replies):
        assert (header.dst_x, header.dst_y, header.src_x, header.src_y) == (*UDP_TX, *CTL)
        assert got_meta == dict(req_meta, l4_sum=ones_complement_sum(payload), l4_sum_valid=1)
    assert [(h.msg_type, (h.dst_x, h.dst_y), m.addr, m.data) for h, m in ctl] == want_ctl


def test_addresses_and_packets():
    assert eb.address(3, 1, 0x1002) == 0x0304_4008
    assert eb.target(0x0304_4008) == (3, 1, 0x1002)
    assert eb.target(eb.address(255, eb.Y_LIMIT - 1, 0xFFFF)) == (255, eb.Y_LIMIT - 1, 0xFFFF)
    with pytest.raises(ValueError, match="y 0 to 63"):
        eb.address(0, 64, 0)
    # Our packet builders make LiteX's packets, byte for byte.
    assert eb.read_packet([4, 8, 0x0304_4008], 77) == litex_read([4, 8, 0x0304_4008], 77)
    assert eb.write_packet(0x100, [1, 2]) == litex_write(0x100, [1, 2])
    assert eb.probe() == litex_probe()


@pytest.mark.parametrize("width", [64, 512])
def test_litex_reads_and_writes_reach_the_agents(width):
    """Reads (one word, consecutive words, words at several positions in one record, a read
    running into a refused word or the silent position), writes (taking effect, read back,
    refused part way), a probe, and the controller's own requests between them: each control
    message and each reply the model's, replies decoded by LiteX to the base return address it
    asked for; writes are not answered."""
    rng = random.Random(width)
    agents = Agents(random.Random(4))
    a = eb.address
    packets = [
        litex_probe(),
        litex_read([a(1, 0, 0x1003)], 1),
        litex_read([a(0, 0, k) for k in range(5)], 2),
        litex_read([a(2, 1, 0x1010), a(0, 0, 3), a(1, 0, 7)], 3),
        litex_write(a(1, 0, 0x1004), [0xDEADBEEF, 7, 0x01020304]),
        litex_read([a(1, 0, 0x1004 + k) for k in range(3)], 4),
        litex_read([a(2, 1, 0x104E + k) for k in range(4)], 5),     # 0x1050 is read-only
        litex_write(a(2, 1, 0x104F), [1, 2, 3]),                     # refused at its second
        litex_read([a(0, 0, 1), a(*SILENT, 0)], 6),                 # no agent answers
        litex_read([a(1, 0, 0x1000 + k) for k in range(eb.MAX_RECORD_WORDS)], 7),
    ]
    requests = [(p, meta(rng)) for p in packets]
    requests.insert(3, (read_request(1, 0, 0x1003, 2, tag=5), meta(rng, port=7200)))
    requests.insert(7, (write_request(0, 0, 0x1001, [11]), meta(rng, port=7200)))
    n_replies = sum(1 for p, m in requests if m["local_port"] != eb.ETHERBONE_PORT
                    or p[10] == 0)                  # writes (wcount) go unanswered
    # All at once (a write is never answered), into a queue that holds them all.
    replies, ctl, counters = run(width, requests, agents, expect=n_replies, limit=None,
                                 stall=0.2, seed=width, reply_timeout=300, queue=len(requests))
    check(replies, ctl, requests, Agents(random.Random(4)))
    # LiteX reads its replies: each to the base return address its read asked for.
    decoded = []
    for _, _, payload in replies:
        if payload[:2] != b"No":                # the controller's own format
            continue
        packet = EtherbonePacket(32, bytearray(payload))
        packet.decode()
        if packet.pr:
            decoded.append("probe")
        else:
            record = packet.records.pop()
            decoded.append((record.writes.base_addr, record.writes.get_datas()))
    assert decoded[0] == "probe"
    assert [d[0] for d in decoded[1:]] == [1, 2, 3, 4, 5, 6, 7]
    assert decoded[4][1] == [0xDEADBEEF, 7, 0x01020304]         # the write took effect
    assert decoded[6][1][1] == 0                                 # the silent position: 0
    assert counters["requests"] == len(requests) and counters["bad_request"] == 0
    assert counters["timeouts"] == 1 and counters["writes"] == 3


@pytest.mark.parametrize("width", [64, 512])
def test_malformed_packets_are_dropped_and_counted(width):
    """Another magic, version or size, byte enables other than 0x0F, a record that reads and
    writes or does neither, more than MAX_RECORD_WORDS words, a packet short of its words or of
    its header, a write running past the address map: each dropped unanswered, no control
    message, counted in bad_request; the good read after them is served."""
    rng = random.Random(7 + width)
    agents = Agents(random.Random(0))
    good = eb.read_packet([eb.address(1, 0, 0x1001)], 9)

    def patched(index, value, packet=good):
        return packet[:index] + bytes([value]) + packet[index + 1:]

    both = eb.read_packet([0], 0)[:10] + bytes([1, 1]) + bytes(12)
    bad = [patched(0, 0x4F), patched(2, 0x20), patched(3, 0x48), patched(9, 0x03),
           patched(11, 0), both, eb.read_packet(range(0, 4 * 63, 4)), good[:-1], good[:7],
           eb.write_packet(eb.address(1, 0, 0xFFFF), [1, 2])]
    requests = [(p, meta(rng)) for p in bad] + [(good, meta(rng))]
    replies, ctl, counters = run(width, requests, agents, expect=1, limit=None,
                                 queue=len(requests))
    check(replies, ctl, requests[-1:], Agents(random.Random(0)))
    assert counters["bad_request"] == len(bad) and counters["requests"] == len(bad) + 1
    assert counters["reads"] == 1 and counters["dropped"] == 0


def test_without_etherbone_the_port_is_the_controllers_own():
    """etherbone_port=None: a datagram on port 1234 is read as the controller's own format
    (here a bad request, answered with 0xFF)."""
    rng = random.Random(2)
    requests = [(eb.read_packet([eb.address(1, 0, 0x1001)], 9), meta(rng))]
    replies, ctl, _ = run(64, requests, Agents(random.Random(0)), etherbone_port=None)
    assert parse_reply(replies[0][2]).status == STATUS_BAD_REQUEST and ctl == []
    replies, _, _ = run(64, requests, Agents(random.Random(0)))
    assert eb.reply_words(replies[0][2])[0] == 9


def test_csr_csv_reads_in_litex(tmp_path):
    """LiteX's CSRBuilder reads the csr.csv: every counter and register word at its Etherbone
    address, read-only or read-write, a 64-bit counter as two words; tables left out."""
    counters = CounterSignature({"frames": (64, "frames"), "bad": "bad ones"})
    tmap = TileMap.build("udp_rx", 2, 0, counters=[("", counters)],
                         registers=RegisterSignature({"port": Register(16, "the port", 7),
                                                      "rules": Table(4, 32, "rules")}))
    dmap = DesignMap({"udp_rx": tmap}, controller=(3, 1))
    path = tmp_path / "csr.csv"
    path.write_text(eb.csr_csv(dmap))
    litex = CSRBuilder(comm=SimpleNamespace(read=None, write=None), csr_csv=str(path))
    regs = litex.regs.d
    assert regs["udp_rx_port"].addr == eb.address(2, 0, 0x1000)
    assert regs["udp_rx_port"].mode == "rw" and regs["udp_rx_port"].length == 1
    assert not any("rules" in name for name in regs)
    assert regs["udp_rx_frames_w0"].addr == eb.address(2, 0, 0)
    assert regs["udp_rx_frames_w1"].addr == eb.address(2, 0, 1)
    assert regs["udp_rx_bad"].addr == eb.address(2, 0, 2) and regs["udp_rx_bad"].mode == "ro"
    assert litex.bases.d["udp_rx"] == eb.address(2, 0, 0)
