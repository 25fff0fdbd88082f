"""Paged translation in a whole design (Amaranth's simulator, 64 bits): two untrusted tiles whose
monitors translate by pages (``MonitorConfig(tlbs=...)``), the pages given with
``Kernel.map_pages``, the memory manager answering each TLB miss. Each tile's stores and loads
reach its own pages (the same virtual address is two different memories' bytes), each monitor
misses only on its own accesses (no tile's fill serves another), and a tile touching a page
only the other was given faults (PAGE_FAULT: sunk, logged, quarantined) while the other keeps
working.

    (0,0) app_a*    (1,0) app_b*    (2,0) mm
    (0,1) spy       (1,1) mem0      (2,1) errors        * untrusted, paged
"""

import sys
from pathlib import Path

import pytest

from apiary.design import Design, DesignError
from apiary.os.kernel import Kernel
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK,
                                   decode_mem_message, mem_message_flits)
from apiary.os.monitor import MonitorConfig
from apiary.os.tlb import TlbConfig
from apiary.os.uapi import FaultKind, KernelMeta, KernelMsgType as K, Perm, virtual_address, \
    decode_kernel_message, kernel_message_flits
from apiary.sim import open_sim
from apiary.tiles import RawPortTile

sys.path.insert(0, str(Path(__file__).parent))
from test_kernel_backends import Driver as KernelDriver  # noqa: E402

APP_A, APP_B, SPY, MEM, MANAGER, ERRORS = (0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)
WIDTH = 64
SHARED_V = 0x10_000         # both tiles were given pages here
A_ONLY_V = 0x40_000         # only app_a was


def paged_tiles(name, width=WIDTH):
    """The layout above: the kernel, two paged untrusted tiles and the trusted spy."""
    d = Design(name, cols=3, rows=2, width=width)
    kernel = Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 15)},
                    monitor=MonitorConfig(tlbs=(TlbConfig(sets=2, ways=2),)))
    d.add("app_a", RawPortTile, at=APP_A, trusted=False)
    d.add("app_b", RawPortTile, at=APP_B, trusted=False)
    d.add("spy", RawPortTile, at=SPY)
    kernel.trust("spy")
    return d, kernel


def paged_design(width=WIDTH):
    d, kernel = paged_tiles("paged", width)
    pages = {"a": kernel.map_pages("app_a", 2 << 12, vaddr=SHARED_V),
             "b": kernel.map_pages("app_b", 2 << 12, vaddr=SHARED_V),
             "a_only": kernel.map_pages("app_a", 1 << 12, vaddr=A_ONLY_V, perm=Perm.RW)}
    return d, pages


class Driver(KernelDriver):
    def access(self, port, at, msg_type, vaddr, size, payload=b"", tag=0):
        self.send(port, mem_message_flits(self.width, msg_type, vaddr, size, payload, src=at,
                                          dst=(7, 7), tag=tag))
        return [decode_mem_message(f, self.width) for f in self.got(port)]


def test_two_paged_tiles_are_isolated_and_an_unmapped_page_faults():
    d, pages = paged_design()
    with open_sim(d, "pysim", idle_cycles=150) as sim:
        drv = Driver(sim, WIDTH)
        # each tile stores to the same virtual address, and reads its own bytes back
        for port, at, fill in (("app_a", APP_A, b"A"), ("app_b", APP_B, b"B")):
            (ack,) = drv.access(port, at, STORE_MEM, SHARED_V + 0x10, 32, fill * 32, tag=5)
            header, meta, _ = ack
            assert (header.msg_type, meta["error"], meta["tag"]) == (STORE_MEM_ACK, 0, 5)
            # the ack carries the physical address the store went to: the tile's own page
            assert meta["addr"] == pages[port[-1]].base + 0x10
        for port, at, fill in (("app_a", APP_A, b"A"), ("app_b", APP_B, b"B")):
            (ack,) = drv.access(port, at, LOAD_MEM, SHARED_V + 0x10, 32, tag=6)
            assert ack[0].msg_type == LOAD_MEM_ACK and ack[2] == fill * 32
        counters = sim.counters()
        # one miss each (its own page), then hits: app_b's load did not use app_a's entry
        assert counters["app_a_monitor_tlb_misses"] == 1
        assert counters["app_b_monitor_tlb_misses"] == 1
        assert counters["app_a_monitor_tlb_hits"] == 2 and counters["app_b_monitor_tlb_hits"] == 2
        assert counters["mm_page_fills"] == 2

        # app_b touches a page only app_a has: a fault, nothing reaches memory
        assert drv.access("app_b", APP_B, STORE_MEM, A_ONLY_V + 8, 4, b"evil") == []
        drv.send("spy", kernel_message_flits(WIDTH, K.FAULT_READ, KernelMeta(handle=0),
                                             src=SPY, dst=ERRORS))
        (entry,) = drv.got("spy")
        meta = decode_kernel_message(entry, WIDTH)[1]
        assert (meta.op, meta.mem_x, meta.mem_y) == (FaultKind.PAGE_FAULT, *APP_B)
        assert (meta.addr, meta.size) == (A_ONLY_V + 8, 4)
        counters = sim.counters()
        assert counters["app_b_monitor_quarantined"] == 1
        assert counters["app_a_monitor_quarantined"] == 0
        assert counters["mm_page_faults"] == 1

        # app_a's page there is intact and app_a keeps working
        (ack,) = drv.access("app_a", APP_A, STORE_MEM, A_ONLY_V + 8, 4, b"good")
        assert ack[1]["error"] == 0
        (ack,) = drv.access("app_a", APP_A, LOAD_MEM, A_ONLY_V + 8, 4)
        assert ack[2] == b"good"
        # and app_b's own page still holds its bytes: app_b is quarantined, not app_a
        (ack,) = drv.access("app_a", APP_A, LOAD_MEM, SHARED_V + 0x10, 4)
        assert ack[2] == b"AAAA"


def test_map_pages_errors_are_sentences():
    d = Design("paged_bad", cols=3, rows=2, width=WIDTH)
    kernel = Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 14)})
    d.add("app", RawPortTile, at=APP_A, trusted=False)
    d.add("peer", RawPortTile, at=APP_B)
    with pytest.raises(DesignError, match="not an untrusted tile"):
        kernel.map_pages("peer", 4096)
    with pytest.raises(DesignError, match="page-aligned"):
        kernel.map_pages("app", 4096, vaddr=100)
    with pytest.raises(DesignError, match="no kernel memory 'mem9'"):
        kernel.map_pages("app", 4096, memory="mem9")
    with pytest.raises(DesignError, match="do not fit"):
        kernel.map_pages("app", 1 << 14)
    kernel.map_pages("app", 4096)
    with pytest.raises(DesignError, match="overlaps pages"):
        kernel.map_pages("app", 4096)
    # the pages came off the top: the segments' allocator keeps the rest
    assert d.tiles["mm"].params["memories"][0] == (*MEM, (1 << 14) - 4096)
    # the app's monitor translates by segments: its pages would never be used
    from apiary.top import DesignTop
    d.check()
    with pytest.raises(DesignError, match="no TLB of that page size"):
        DesignTop(d)


def load_round_trip(sim, drv, width, vaddr):
    """Cycles from a load's frame queued at app_a to its ack's last word out."""
    start = sim.cycle
    drv.send("app_a", mem_message_flits(width, LOAD_MEM, vaddr, 8, b"", src=APP_A, dst=(7, 7)))
    return sim.received("app_a", clear=True)[-1].cycle_last - start


# A load's round trip at each width: through a segment, then paged: a miss, a hit on the same
# page, a miss on the next page, a hit on the first page again.
ROUND_TRIPS = {64: (41, [61, 41, 61, 41]), 512: (31, [43, 31, 43, 31])}


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_round_trips_beside_segment_translation(width):
    """A load's round trip (frame in to ack out, the same for every load but the translation):
    a TLB hit costs what a segment costs, on the page just filled or another page in the TLB
    alike; a miss adds the TLB_MISS to the manager two hops away and its TLB_FILL back (5
    flits each at 64 bits, 1 at 512), the manager's 2 cycles, the fill and the lookup: 20
    cycles at 64 bits, 12 at 512."""
    d, _ = paged_design(width)
    with open_sim(d, "pysim", idle_cycles=150) as sim:
        drv = Driver(sim, width)
        paged = [load_round_trip(sim, drv, width, v)
                 for v in (SHARED_V, SHARED_V + 0x40, SHARED_V + 0x1000, SHARED_V + 0x80)]
    d = Design("segments", cols=3, rows=2, width=width)
    Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 15)})
    d.add("app_a", RawPortTile, at=APP_A, trusted=False)
    with open_sim(d, "pysim", idle_cycles=150) as sim:
        drv = Driver(sim, width)
        drv.send("app_a", kernel_message_flits(width, K.CAP_ALLOC, KernelMeta(size=4096, perm=3),
                                               src=APP_A, dst=APP_A))
        (answer,) = drv.got("app_a")
        handle = decode_kernel_message(answer, width)[1].handle
        segment = load_round_trip(sim, drv, width, virtual_address(handle, 0x40))
    assert (segment, paged) == ROUND_TRIPS[width]
