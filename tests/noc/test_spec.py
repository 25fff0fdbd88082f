"""The message specification: formats are the hardware's layouts, the scapy classes generated
from them encode and decode exactly those layouts, the docs page is generated from them, and
the checker finds what is wrong with a malformed message (and nothing in a good one)."""

import pathlib
import random

import pytest
from amaranth.hdl import unsigned
from amaranth.lib import data, enum
from amaranth.sim import Simulator

from apiary.control.messages import CTL_FORMAT, CTL_META, CtlMeta, CtlMsgType, ctl_message_flits
from apiary.noc.checker import FlitTap, MessageCheckError
from apiary.noc.dissect import TRACE_RECORD, packet_class, scapy_layers, trace_record
from apiary.noc.header import NocHeader, noc_header
from apiary.noc.spec import (decode_message, message_problems, message_specs, messages_markdown,
                             register_formats)
from apiary.noc.testbench import send_flits
from apiary.os.memory_tile import MEM_META, STORE_MEM, mem_message_flits
from apiary.os.uapi import KERNEL_META, KernelMeta, KernelMsgType, kernel_message_flits
from apiary.stream.format import Field, Format
from apiary.stream.queue import Queue
from apiary.noc.flit import flit_layout
from beehive.proto.messages import PACKET_LEVELS, PACKET_META, MsgType
from beehive.proto.tcp.app import APP_META, Status, app_message_flits

ROOT = pathlib.Path(__file__).resolve().parents[2]
WIDTHS = (64, 128, 256, 512)
#: The modules that define the project's messages: the docs page lists theirs.
MESSAGE_MODULES = ("apiary.control.messages", "apiary.os.uapi", "apiary.os.memory_tile",
                   "apiary.tiles.tx_credit", "beehive.proto.messages", "beehive.proto.arp",
                   "beehive.proto.tcp.app", "beehive.apps.contexts")


def every_format():
    formats = {s.meta.name: s.meta for s in message_specs().values() if s.meta is not None}
    formats.update({"noc_header_64": noc_header(64), "noc_header_512": noc_header(512),
                    "noc_trace": TRACE_RECORD})
    return formats


def test_the_formats_are_the_hardware_layouts():
    """The layouts the hardware uses are the formats' (the same StructLayouts as before the
    formats existed: equal member for member, so the same bits)."""
    assert CTL_META == data.StructLayout({"data": unsigned(32), "addr": unsigned(16),
                                          "tag": unsigned(8), "status": unsigned(4)})
    assert MEM_META == data.StructLayout({"addr": unsigned(48), "size": unsigned(30),
                                          "error": unsigned(1), "wrap": unsigned(6),
                                          "tag": unsigned(8)})
    assert KERNEL_META.size == 192 and KERNEL_META["handle"].offset == 0 \
        and KERNEL_META["user"].offset == 160
    assert PACKET_META.size == 202 and PACKET_META.offset("peer_mac") == 0
    # Each level of a packet's metadata is the first fields of the next, at the same bits: a
    # message that carries fewer of them carries a prefix (the low bits).
    for small, big in zip(PACKET_LEVELS, PACKET_LEVELS[1:]):
        assert small.names == big.names[:len(small.names)]
        assert all(small.offset(n) == big.offset(n) for n in small.names)
    assert [f.size for f in PACKET_LEVELS] == [81, 153, 202]
    assert APP_META.size == 220
    every = every_format()
    assert {"packet_meta", "tcp_app_meta", "mem_meta", "kernel_meta", "ctl_meta"} <= set(every)


@pytest.mark.parametrize("name", sorted(every_format()))
def test_scapy_encoding_equals_the_amaranth_layout_both_ways(name):
    """For random field values the generated scapy class's bytes are the Amaranth layout's
    constant, and scapy's reading of a random value's bytes is the layout's view of it."""
    fmt = every_format()[name]
    cls = packet_class(fmt)
    layout = fmt.layout()
    nbytes = -(-fmt.size // 8)
    rng = random.Random(name)
    for _ in range(40):
        values = {n: rng.getrandbits(fmt.width(n)) for n in fmt.names}
        const = layout.const(values).as_value().value
        scapy_fields = {n.lstrip("_"): v for n, v in values.items()}
        assert bytes(cls(**scapy_fields)) == const.to_bytes(nbytes, "big")
        assert fmt.pack(values) == const
        # ... and back: a random value of the layout, read by scapy.
        raw = rng.getrandbits(fmt.size)
        if fmt.reserved():
            raw = fmt.pack(fmt.unpack(raw))
        view = data.Const(layout, raw)
        parsed = cls(raw.to_bytes(nbytes, "big"))
        for n in fmt.names:
            assert parsed.getfieldval(n.lstrip("_")) == view[n] == fmt.unpack(raw)[n], n


def test_every_module_that_registers_formats_is_on_the_docs_page():
    """The page lists the modules it imports; a module that registers formats and is not among
    them would make the page depend on what else a process happened to import."""
    registering = set()
    for package in ("apiary", "beehive", "platforms"):
        for path in (ROOT / package).rglob("*.py"):
            if "register_formats(" in path.read_text() and path.name != "spec.py":
                registering.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    assert registering == set(MESSAGE_MODULES)


def test_the_docs_page_is_generated_from_the_specification():
    page = (ROOT / "docs" / "messages.md").read_text()
    assert page == messages_markdown(MESSAGE_MODULES), \
        "docs/messages.md is out of date: run the command at its top"
    assert "| [159:156] | `status` | 4 | 0 OK, 1 NO_MEMORY" in page


def good_messages(width):
    return [
        ("ctl", ctl_message_flits(width, CtlMsgType.CTL_ACK, CtlMeta(data=5, addr=9, status=2),
                                  dst=(1, 2), src=(0, 0))),
        ("kernel", kernel_message_flits(width, KernelMsgType.CAP_RESULT,
                                        KernelMeta(handle=3, size=4096, status=1),
                                        dst=(3, 1), src=(3, 1))),
        ("mem", mem_message_flits(width, STORE_MEM, 0x100, 70, bytes(range(70)), dst=(2, 2))),
        ("app", app_message_flits(width, MsgType.TCP_RX_MSG_RESP, flow=7, status=Status.EOF,
                                  length=100)),
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_good_messages_have_no_problems_and_decode(width):
    for what, flits in good_messages(width):
        assert message_problems(flits, width) == [], what
    _, mem = good_messages(width)[2]
    d = decode_message(mem, width)
    assert d.formatted and d.fields()["size"] == 70 and d.payload == bytes(range(70))


def breakage(width):
    """``(flits, field the checker must name)``: one way to break each rule."""
    good = ctl_message_flits(width, CtlMsgType.CTL_READ, CtlMeta(addr=4), dst=(1, 1))
    hdr = NocHeader.unpack([f for f, _ in good], width)
    cases = []
    # A status outside CtlStatus.
    cases.append((ctl_message_flits(width, CtlMsgType.CTL_ACK, CtlMeta(status=9)),
                  "ctl_meta.status"))
    # An unregistered message type.
    bad = NocHeader(**{**vars(hdr), "msg_type": 200})
    cases.append((bad.pack(width) + [f for f, _ in good][len(bad.pack(width)):], "msg_type"))
    # One flit too many: msg_len and payload_bytes disagree with the flit count.
    cases.append(([f for f, _ in good] + [0], "msg_len"))
    # payload_bytes saying more than the message carries.
    bad = NocHeader(**{**vars(hdr), "payload_bytes": 3 * width})
    cases.append((bad.pack(width) + [f for f, _ in good][len(bad.pack(width)):],
                  "payload_bytes"))
    # Bits set above the 60-bit control metadata, in its reserved area.
    words = [f for f, _ in good]
    meta_at = len(words) - 1
    words[meta_at] |= 1 << 60
    cases.append((words, "ctl_meta"))
    return cases


@pytest.mark.parametrize("width", WIDTHS)
def test_problems_name_the_field_at_fault(width):
    for flits, field in breakage(width):
        problems = message_problems(flits, width)
        assert field in [f for f, _ in problems], (field, problems)


def run_tapped(width, messages, cycles, taps):
    """Send ``messages`` (lists of flits) through a queue whose output has a checking tap
    (appended to ``taps`` before the run), for ``cycles`` cycles (the simulation's exception,
    if any, propagates)."""
    dut = Queue(flit_layout(width), 4)
    tap = FlitTap(dut.o, width, "queue out")
    taps.append(tap)

    async def drive(ctx):
        for flits in messages:
            await send_flits(ctx, dut.i, flits)

    async def drain(ctx):
        ctx.set(dut.o.ready, 1)
        for _ in range(cycles):
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(tap.process)
    sim.add_testbench(drive, background=True)
    sim.add_testbench(drain)
    sim.run()


@pytest.mark.parametrize("width", [64, 512])
def test_the_checker_fires_on_a_malformed_message_naming_cycle_and_field(width):
    """A tap on a queue's output: good messages pass quietly and are recorded; the first
    malformed one stops the simulation with the tap, the cycle and the field."""
    good = [f for _, f in good_messages(width)]
    bad = ctl_message_flits(width, CtlMsgType.CTL_ACK, CtlMeta(status=9))
    taps = []
    with pytest.raises(MessageCheckError) as err:
        run_tapped(width, good + [bad], 200, taps)
    text = str(err.value)
    assert text.startswith("queue out, cycle ")
    assert "CtlMsgType.CTL_ACK" in text and "field ctl_meta.status: 9 is not a CtlStatus" in text
    if width == 64:                 # docs/enzian.md quotes this error whole
        doc = " ".join((ROOT / "docs" / "enzian.md").read_text().split())
        assert " ".join(text.split()) in doc, text
    # The good ones passed quietly; the bad one's last flit moved on the cycle named.
    assert [t.flits for t in taps[0].messages] == [tuple(f for f, _ in m) for m in good]
    cycle = int(text.split("cycle ")[1].split(":")[0])
    assert cycle == taps[0].messages[-1].cycle_last + len(bad)


def test_the_checker_is_quiet_on_a_good_run():
    good = [f for _, f in good_messages(64)] * 3
    taps = []
    run_tapped(64, good, 150, taps)
    tap = taps[0]
    assert [t.flits for t in tap.messages] == [tuple(f for f, _ in m) for m in good]
    assert all(a.cycle_last < b.cycle_first for a, b in zip(tap.messages, tap.messages[1:]))


def test_a_trace_record_decodes_with_the_generated_dissectors():
    layers = scapy_layers()
    flits = kernel_message_flits(64, KernelMsgType.CAP_SEND,
                                 KernelMeta(handle=5, addr=0x40, size=64, perm=1, peer_x=3,
                                            user=0xBEEF), dst=(2, 1), src=(4, 0))
    pkt = layers.decode(trace_record(flits, 64, cycle=77, tap=(4, 0)))
    assert (pkt.width, pkt.tap_x, pkt.flits, pkt.meta_bytes, pkt.cycle) == (64, 4, 5, 24, 77)
    head = pkt[layers.header]
    assert (head.msg_type, head.dst_x, head.dst_y, head.src_x, head.msg_len) == (34, 2, 1, 4, 4)
    meta = pkt[layers.meta["kernel_meta"]]
    assert (meta.handle, meta.addr, meta.size, meta.perm, meta.peer_x, meta.user) == \
        (5, 0x40, 64, 1, 3, 0xBEEF)
    assert "KernelMsgType.CAP_SEND" in head.sprintf("%msg_type%")


def test_bad_specifications_are_one_readable_error():
    with pytest.raises(ValueError, match="order must be 'msb' or 'lsb'"):
        Format("x", [("a", 4)], order="middle")
    with pytest.raises(ValueError, match="cannot hold the values"):
        Format("x", [Field("a", 1, values=Status)])
    with pytest.raises(ValueError, match="no reserved fields"):
        Format("x", [("_r", 4)], order="lsb")

    class Loose(enum.Enum, shape=8):
        LOOSE = 201
    with pytest.raises(ValueError, match="not a registered message type"):
        register_formats(Loose, CTL_FORMAT)
    with pytest.raises(ValueError, match="already carries ctl_meta"):
        register_formats([CtlMsgType.CTL_READ], CTL_FORMAT, payload="something else")
