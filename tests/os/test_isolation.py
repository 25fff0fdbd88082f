"""Fault isolation at the NoC level, on a whole design, on both simulation back ends at 64 bits
(the monitor at 512 bits: tests/os/test_monitor.py alone, tests/os/test_apiary_fault.py in a whole
design): two untrusted tiles on rows of their own. One is made to fault; the other's messages
arrive with the same bytes in the same cycles as in a run where nothing faults (it shares no link
with the faulty tile or its fault report), and nothing of the faulty tile's traffic leaves after
the fault. The error manager's log entry for the fault, read back by a trusted tile, names the
tile, the kind and the destination.

    (0,0) a_src* ─▶ (1,0) a_dst     (2,0) mm        (3,0) errors
    (0,1) b_src* ─▶ (1,1) b_dst     (2,1) mem0      (3,1) spy          * untrusted
"""

import pytest

from apiary.design import Design
from apiary.noc.header import Message, NocHeader
from apiary.os.kernel import Kernel
from apiary.os.uapi import FaultKind, KernelMeta, KernelMsgType as K, decode_kernel_message, \
    kernel_message_flits
from apiary.sim import open_sim
from apiary.tiles import RawPortTile
from apiary.tiles.raw_port import frame_message, message_frame


def isolation_design(width):
    d = Design("isolation", cols=4, rows=2, width=width)
    Kernel(d, manager=(2, 0), errors=(3, 0), memories={"mem0": ((2, 1), 4096)})
    for row, name in enumerate("ab"):
        d.add(f"{name}_src", RawPortTile, at=(0, row), trusted=False)
        d.add(f"{name}_dst", RawPortTile, at=(1, row))
        d.route(f"{name}_src", f"{name}_dst", allow=True)
    d.add("spy", RawPortTile, at=(3, 1))
    d.route("spy", "errors")            # FAULT_READ, and its answer
    d.route("errors", "spy")
    return d


def message(width, src, dst, payload):
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=src[0], src_y=src[1], msg_type=12)
    return message_frame(Message(hdr, [], payload).flits(width), width)


def run(sim, width, fault):
    """b sends 12 messages, a 9 at the same time; with ``fault`` a's fifth goes to the spy, which
    it holds no capability for. Returns the frames (data and cycles) at a_dst, b_dst and the
    spy, and the counters."""
    sim.run(20)
    for k in range(12):
        sim.send(message(width, (0, 1), (1, 1), bytes([k]) * 9), port="b_src")
    for k in range(9):
        bad = fault and k == 4
        sim.send(message(width, (0, 0), (3, 1) if bad else (1, 0),
                         b"not allowed" if bad else bytes([0x80 + k]) * 5), port="a_src")
    sim.run(until_idle=True)
    got = {name: [(f.data, f.cycle_first, f.cycle_last) for f in sim.received(name)]
           for name in ("a_dst", "b_dst", "spy")}
    return got, sim.counters()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_a_fault_leaves_the_other_tiles_traffic_untouched(backend):
    width = 64
    design = isolation_design(width)
    with open_sim(design, backend, idle_cycles=100) as sim:
        clean, clean_counters = run(sim, width, fault=False)
    with open_sim(design, backend, idle_cycles=100) as sim:
        faulty, counters = run(sim, width, fault=True)
        sim.send(message_frame(kernel_message_flits(
            width, K.FAULT_READ, KernelMeta(handle=0), src=(3, 1), dst=(3, 0)), width),
            port="spy")
        sim.run(until_idle=True)
        (entry,) = sim.received("spy", clear=True)
    assert len(clean["b_dst"]) == 12
    assert faulty["b_dst"] == clean["b_dst"]                     # same bytes, same cycles
    assert len(clean["a_dst"]) == 9
    assert faulty["a_dst"] == clean["a_dst"][:4]                 # nothing after the fault
    assert faulty["spy"] == [] and clean["spy"] == []
    assert counters["a_src_monitor_quarantined"] == 1
    assert counters["a_src_monitor_faults"] == 1
    assert counters["a_src_monitor_sunk_out"] == 5              # the bad one and the 4 after
    assert counters["b_src_monitor_passed_out"] == 12 and counters["b_src_monitor_faults"] == 0
    assert counters["errors_faults"] == 1 and clean_counters["errors_faults"] == 0

    header, meta = decode_kernel_message(frame_message(entry.data, width), width)
    assert header.msg_type == K.FAULT_ENTRY.value
    assert (meta.mem_x, meta.mem_y, meta.op) == (0, 0, FaultKind.NO_IPC_CAP)
    assert (meta.peer_x, meta.peer_y, meta.user) == (3, 1, 12)
