"""Pages mapped and unmapped at run time (apiary/os/paging.py), in a whole design on Amaranth's
simulator at 64 bits: a trusted tile maps a frame of the kernel's page pool into app_a, app_a
hammers it with loads, the frame is unmapped while loads are in flight and mapped into app_b.
The unmap is answered only after app_a's monitor has flushed its TLB and every load it had sent
is answered (the memory takes 400 cycles a read); after that no access of app_a reaches the
frame, however long it keeps trying (it page-faults, is quarantined, is released and tries
again), and app_b reads back exactly what it wrote.

    (0,0) app_a*    (1,0) app_b*    (2,0) mm
    (0,1) spy       (1,1) mem0      (2,1) errors        * untrusted, paged
"""

import sys
from pathlib import Path

import pytest

from apiary.design import DesignError
from apiary.noc.header import Fbits
from apiary.os.memory_tile import LOAD_MEM, STORE_MEM, decode_mem_message, mem_message_flits
from apiary.os.uapi import (FaultKind, KernelMeta, KernelMsgType as K, Perm, Status,
                            decode_kernel_message, kernel_message_flits)
from apiary.sim import open_sim
from apiary.tiles.raw_port import frame_message, message_frame

sys.path.insert(0, str(Path(__file__).parent))
from test_paging_design import (APP_A, APP_B, ERRORS, MANAGER, MEM, SPY, WIDTH,  # noqa: E402
                                paged_tiles)

V_A, V_B = 0x30_000, 0x70_000
HAMMER = 24                 # app_a's stores, 32 bytes each, over the frame's first 768 bytes


def page_map_design():
    d, kernel = paged_tiles("page_maps")
    return d, kernel.page_pool(4)


class Run:
    def __init__(self, sim):
        self.sim = sim

    def send(self, port, flits, run=True):
        self.sim.send(message_frame(flits, WIDTH), port=port)
        if run:
            self.sim.run(until_idle=True)

    def got(self, port):
        return [frame_message(f.data, WIDTH) for f in self.sim.received(port, clear=True)]

    def page_op(self, msg_type, at, vaddr, frame=0, user=0, run=True):
        self.send("spy", kernel_message_flits(WIDTH, msg_type, KernelMeta(
            peer_x=at[0], peer_y=at[1], addr=vaddr, root=frame, perm=Perm.RW, user=user),
            src=SPY, dst=MANAGER), run)

    def result(self):
        (flits,) = self.got("spy")
        meta = decode_kernel_message(flits, WIDTH)[1]
        return meta.op, meta.status, meta.user

    def store(self, port, at, vaddr, data, run=True):
        """A store; run, its ack (if any) is read and dropped."""
        self.send(port, mem_message_flits(WIDTH, STORE_MEM, vaddr, len(data), data, src=at,
                                          dst=(7, 7)), run)
        if run:
            self.got(port)

    def load(self, port, at, vaddr, size):
        self.send(port, mem_message_flits(WIDTH, LOAD_MEM, vaddr, size, b"", src=at,
                                          dst=(7, 7)))
        return [decode_mem_message(f, WIDTH)[2] for f in self.got(port)]


def test_a_frame_unmapped_from_one_tile_and_mapped_to_another_is_never_reached_again():
    d, pool = page_map_design()
    with open_sim(d, "pysim", idle_cycles=500, memory_latency=400) as sim:
        run = Run(sim)
        run.page_op(K.PAGE_MAP, APP_A, V_A, frame=1, user=11)
        assert run.result() == (K.PAGE_MAP.value, Status.OK, 11)
        run.store("app_a", APP_A, V_A + 8, b"first")
        assert run.load("app_a", APP_A, V_A + 8, 5) == [b"first"]
        # The table refuses a page mapped twice and a frame outside the pool.
        run.page_op(K.PAGE_MAP, APP_A, V_A, frame=2)
        assert run.result()[1] == Status.BAD_HANDLE
        run.page_op(K.PAGE_MAP, APP_A, V_A + 0x1000, frame=pool.pages)
        assert run.result()[1] == Status.BAD_SIZE
        run.got("app_a")

        # app_a hammers the frame with loads (each 400 cycles in the memory); the unmap goes in
        # while they are in flight.
        for k in range(HAMMER):
            run.send("app_a", mem_message_flits(WIDTH, LOAD_MEM, V_A + 32 * k, 32, b"",
                                                src=APP_A, dst=(7, 7)), run=False)
        sim.run(150)
        loads_before = sim.counters()["mem0_loads"]
        run.page_op(K.PAGE_UNMAP, APP_A, V_A, user=12, run=False)
        while not sim.received("spy"):
            sim.run(1)
        counters = sim.counters()
        assert run.result() == (K.PAGE_UNMAP.value, Status.OK, 12)
        # Answered after app_a's monitor flushed its TLB and every load it passed was answered.
        assert counters["app_a_monitor_shootdowns"] == 1 and counters["mm_unmaps"] == 1
        assert counters["mem0_loads"] > loads_before + 1
        assert counters["mem0_loads"] + counters["mem0_stores"] \
            == counters["app_a_monitor_passed_out"]
        sim.run(until_idle=True)
        unmapped_at = sim.counters()["mem0_stores"]

        # The frame goes to app_b, which fills what app_a hammered, while app_a keeps trying.
        run.page_op(K.PAGE_MAP, APP_B, V_B, frame=1, user=13)
        assert run.result() == (K.PAGE_MAP.value, Status.OK, 13)
        for k in range(HAMMER):
            run.store("app_b", APP_B, V_B + 32 * k, b"b" * 32, run=False)
            run.store("app_a", APP_A, V_A + 32 * k, b"A" * 32, run=False)
        sim.run(until_idle=True)
        counters = sim.counters()
        assert counters["app_a_monitor_quarantined"] == 1
        assert counters["app_a_monitor_page_faults"] == 1
        # app_a is released, and tries again: it faults again, and reaches nothing.
        run.send("spy", kernel_message_flits(WIDTH, K.RELEASE, KernelMeta(
            peer_x=APP_A[0], peer_y=APP_A[1], peer_fbits=Fbits.LOCAL0), src=SPY, dst=ERRORS))
        run.store("app_a", APP_A, V_A, b"A" * 32)
        counters = sim.counters()
        assert counters["app_a_monitor_quarantined"] == 1
        assert counters["app_a_monitor_page_faults"] == 2
        assert counters["mem0_stores"] == unmapped_at + HAMMER       # app_b's only
        run.got("app_b")
        data = b"".join(run.load("app_b", APP_B, V_B + 256 * k, 256)[0] for k in range(3))
        assert data == b"b" * (32 * HAMMER)
        # The fault log names app_a's page fault at the old address.
        run.send("spy", kernel_message_flits(WIDTH, K.FAULT_READ, KernelMeta(handle=0),
                                             src=SPY, dst=ERRORS))
        meta = decode_kernel_message(run.got("spy")[0], WIDTH)[1]
        assert (meta.op, meta.mem_x, meta.mem_y) == (FaultKind.PAGE_FAULT, *APP_A)
        assert V_A <= meta.addr < V_A + 32 * HAMMER


def test_an_unmap_of_a_page_not_mapped_is_refused_and_the_pool_is_checked():
    d, pool = page_map_design()
    assert pool.pages == 4 and d.tiles["mm"].params["memories"][0] == (*MEM, pool.base)
    with open_sim(d, "pysim", idle_cycles=150) as sim:
        run = Run(sim)
        run.page_op(K.PAGE_UNMAP, APP_B, V_B, user=5)
        assert run.result() == (K.PAGE_UNMAP.value, Status.NO_ENTRY, 5)
        assert sim.counters()["mm_map_refused"] == 1
    kernel = d.guard
    with pytest.raises(DesignError, match="page pool already"):
        kernel.page_pool(1)
