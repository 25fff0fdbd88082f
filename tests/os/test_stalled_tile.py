"""Tiles that merely stop, in a whole design, beside a tenant that does nothing wrong:

* a tile that stops reading with one of its own loads in flight: its memory tile's answer waits
  at its monitor, so without the monitor's stall watch (``MonitorConfig(stall_limit=None)``) the
  memory tile answers nobody else, for good; with it, the tile is quarantined as ``STALLED``
  within the limit, the tenant's load is answered, the error manager logs the fault, and a
  release brings the tile back;
* a tile that starts a message and never ends it: the routers on its path stay held, so without
  the watch the tenant's messages to the same tile never arrive; with it, the message is ended
  on the NoC (``UNFINISHED``), the tenant's arrive, and a release restarts the tile;
* with a receive buffer at every monitor (``MonitorConfig(rx_buffer_flits=...)``) and no watch,
  the memory tile never waits for the tile that stopped reading: its answer is held in the
  buffer, or dropped and counted when it does not fit, and the tenant's load is answered at once.

    (0,0) app*      (1,0) tenant*   (2,0) mm          * untrusted
    (0,1) spy       (1,1) mem0      (2,1) errors
"""

import pytest

from apiary.design import Design
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.os.kernel import Kernel
from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, decode_mem_message, mem_message_flits
from apiary.os.monitor import MonitorConfig
from apiary.os.uapi import (FaultKind, KernelMeta, KernelMsgType as K, Perm, Status,
                            decode_kernel_message, kernel_message_flits, virtual_address)
from apiary.sim import open_sim
from apiary.tiles import RawPortTile
from apiary.tiles.hostile import EndlessTile, HangingPortTile
from apiary.tiles.raw_port import frame_message, message_frame

APP, TENANT, SPY, MEM, MANAGER, ERRORS = (0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)
LIMIT = 300


def kernel_design(name, app, stall_limit, rx_buffer_flits=None, **params):
    """The app (of class ``app``, with ``params``) and the tenant, untrusted, beside the kernel
    and the spy."""
    d = Design(name, cols=3, rows=2, width=64)
    kernel = Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 14)},
                    monitor=MonitorConfig(stall_limit=stall_limit,
                                          rx_buffer_flits=rx_buffer_flits))
    d.add("app", app, at=APP, trusted=False, **params)
    d.add("tenant", RawPortTile, at=TENANT, trusted=False)
    d.add("spy", RawPortTile, at=SPY)
    kernel.trust("spy")                 # its FAULT_READ and RELEASE, to the error manager
    return d


def stalled_design(stall_limit, rx_buffer_flits=None):
    return kernel_design("stalled_tile", HangingPortTile, stall_limit, rx_buffer_flits)


class Run:
    def __init__(self, sim):
        self.sim = sim

    def send(self, port, flits, cycles=None):
        self.sim.send(message_frame(flits, 64), port=port)
        if cycles is None:
            self.sim.run(until_idle=True)
        else:
            self.sim.run(cycles)

    def got(self, port):
        return [frame_message(f.data, 64) for f in self.sim.received(port, clear=True)]

    def alloc(self, port, place):
        self.send(port, kernel_message_flits(64, K.CAP_ALLOC, KernelMeta(size=1024, perm=Perm.RW),
                                             src=place, dst=place))
        (flits,) = self.got(port)
        meta = decode_kernel_message(flits, 64)[1]
        assert (meta.op, meta.status) == (K.CAP_ALLOC.value, Status.OK)
        return meta.handle

    def load(self, port, place, handle, size, cycles=None):
        self.send(port, mem_message_flits(64, LOAD_MEM, virtual_address(handle, 0), size, b"",
                                          src=place, dst=(7, 7)), cycles)


def hang_then_load(sim):
    """The app allocates (its one read: the CAP_RESULT), then loads 512 bytes it never takes;
    the tenant allocates and loads 8. Returns the driver."""
    run = Run(sim)
    app = run.alloc("app", APP)
    tenant = run.alloc("tenant", TENANT)
    run.load("app", APP, app, 512, cycles=200)
    run.load("tenant", TENANT, tenant, 8, cycles=4 * LIMIT)
    return run, tenant


def test_a_tile_that_stops_reading_is_quarantined_and_the_memory_serves_the_others():
    """On Amaranth's simulator; tests/bench/test_faults_bench.py checks the same fault on
    Verilator (its HUNG case)."""
    with open_sim(stalled_design(LIMIT), "pysim") as sim:
        run, tenant = hang_then_load(sim)
        (ack,) = run.got("tenant")
        header, meta, _ = decode_mem_message(ack, 64)
        assert (header.msg_type, meta["addr"]) == (LOAD_MEM_ACK, virtual_address(tenant, 0))
        c = sim.counters()
        assert c["app_monitor_quarantined"] == 1 and c["app_monitor_faults"] == 1
        assert c["tenant_monitor_faults"] == 0 and c["errors_faults"] == 1
        run.send("spy", kernel_message_flits(64, K.FAULT_READ, KernelMeta(handle=0),
                                             src=SPY, dst=ERRORS))
        (entry,) = run.got("spy")
        meta = decode_kernel_message(entry, 64)[1]
        assert (meta.mem_x, meta.mem_y, meta.op) == (*APP, FaultKind.STALLED)
        # The release resets the tile (it reads again) and gives its memory back.
        run.send("spy", kernel_message_flits(64, K.RELEASE, KernelMeta(
            peer_x=APP[0], peer_y=APP[1], peer_fbits=Fbits.LOCAL0), src=SPY, dst=ERRORS))
        sim.run(200)
        assert sim.counters()["app_monitor_quarantined"] == 0
        run.alloc("app", APP)


@pytest.mark.slow
def test_without_the_watch_the_other_tenant_waits_for_good():
    """The failure the watch is for: with ``stall_limit=None`` the tenant's load is never
    answered (the memory tile's answer to the app waits at the app's monitor)."""
    with open_sim(stalled_design(None), "verilator") as sim:
        run, _ = hang_then_load(sim)
        sim.run(20 * LIMIT)
        assert run.got("tenant") == []
        c = sim.counters()
        assert c.get("app_monitor_quarantined", 0) == 0 and c.get("errors_faults", 0) == 0


@pytest.mark.parametrize("flits, dropped", [(128, 0), (32, 1)], ids=["held", "dropped"])
def test_with_receive_buffers_the_memory_never_waits_for_a_tile_that_stopped_reading(
        flits, dropped):
    """No stall watch at all: the app's 512-byte answer (66 flits) waits in a 128-flit buffer,
    or finds a 32-flit one too small and is dropped and counted; either way the memory tile
    answers the tenant as it would with the app gone, and nobody is quarantined."""
    with open_sim(stalled_design(None, rx_buffer_flits=flits), "pysim") as sim:
        run, tenant = hang_then_load(sim)
        (ack,) = run.got("tenant")
        header, meta, _ = decode_mem_message(ack, 64)
        assert (header.msg_type, meta["addr"]) == (LOAD_MEM_ACK, virtual_address(tenant, 0))
        c = sim.counters()
        assert c["app_monitor_rx_dropped"] == dropped and c["tenant_monitor_rx_dropped"] == 0
        assert c["app_monitor_quarantined"] == 0 and c.get("errors_faults", 0) == 0


def endless_design(stall_limit):
    d = kernel_design("endless_message", EndlessTile, stall_limit, dst=SPY)
    d.route("app", "spy", allow=True)
    d.route("tenant", "spy", allow=True)
    return d


def tenant_messages(sim, count=3):
    run = Run(sim)
    sim.run(100)                        # the app's message is part way
    sent = []
    for k in range(count):
        hdr = NocHeader(dst_x=SPY[0], dst_y=SPY[1], src_x=TENANT[0], src_y=TENANT[1],
                        msg_type=12)
        sent.append(Message(hdr, [], bytes([k]) * 20).flits(64))
        run.send("tenant", sent[-1], cycles=50)
    return run, sent


def test_a_message_never_ended_is_cut_and_the_path_serves_the_others():
    """On Amaranth's simulator; tests/bench/test_faults_bench.py checks the same fault on
    Verilator (its ENDLESS case)."""
    with open_sim(endless_design(LIMIT), "pysim") as sim:
        run, sent = tenant_messages(sim)
        sim.run(4 * LIMIT)
        got = run.got("spy")
        assert len(got) == 1 + len(sent)
        cut, *tenant = got
        assert len(cut) == 4 and cut[-1][1] == 1      # 3 flits sent, 1 to end it
        assert tenant == sent
        c = sim.counters()
        assert c["app_monitor_quarantined"] == 1 and c["errors_faults"] == 1
        assert c["tenant_monitor_faults"] == 0
        run.send("spy", kernel_message_flits(64, K.FAULT_READ, KernelMeta(handle=0),
                                             src=SPY, dst=ERRORS))
        (entry,) = run.got("spy")
        assert decode_kernel_message(entry, 64)[1].op == FaultKind.UNFINISHED
        # Released, the tile runs again from reset: it starts its message anew (and is cut
        # again), so the slot serves.
        run.send("spy", kernel_message_flits(64, K.RELEASE, KernelMeta(
            peer_x=APP[0], peer_y=APP[1], peer_fbits=Fbits.LOCAL0), src=SPY, dst=ERRORS),
            cycles=4 * LIMIT)
        (again,) = run.got("spy")
        assert again == cut
        assert sim.counters()["app_monitor_faults"] == 2


@pytest.mark.slow
def test_without_the_watch_a_message_never_ended_holds_its_path():
    with open_sim(endless_design(None), "verilator") as sim:
        run, _ = tenant_messages(sim)
        sim.run(20 * LIMIT)
        assert run.got("spy") == []
