"""The Apiary kernel in a whole design, on both simulation back ends at 64 bits (at 512 bits:
tests/os/test_apiary_fault.py on Verilator, and every kernel tile alone in its own tests): an
untrusted tile's NoC traffic driven message by message through a RawPortTile (NoC messages as
frames). Allowed IPC and memory traffic passes unchanged and in order (memory through a segment
the tile allocates); then every violation kind in turn is sunk, logged by the error manager with
the right fields (read back by a trusted tile), quarantines exactly that tile, and is lifted by
a release, after which the tile works again.

    (0,0) app*      (1,0) peer      (2,0) mm          (3,0) other
    (0,1) spy       (1,1) mem0      (2,1) errors          * untrusted

Last, IPC capabilities change at run time: the spy (a trusted control tile the kernel listens
to) grants the app a capability out to itself and one in from ``other``, then takes them back.
"""

import pytest

from apiary.design import Design
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.os.kernel import Kernel
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK,
                                   decode_mem_message, mem_message_flits)
from apiary.os.monitor import RateLimit
from apiary.os.uapi import (FaultKind, IpcDir, KernelMeta, KernelMsgType as K, Perm, Status,
                            decode_kernel_message, kernel_message_flits, virtual_address)
from apiary.sim import open_sim
from apiary.tiles import RawPortTile
from apiary.tiles.raw_port import frame_message, message_frame

APP, PEER, SPY, MEM, MANAGER, ERRORS = (0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)
OTHER = (3, 0)
RATE = RateLimit(burst=48, refill=1, period=4, on_excess="fault")


def kernel_design(width):
    d = Design("kernel_backends", cols=4, rows=2, width=width)
    kernel = Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 14)})
    d.add("app", RawPortTile, at=APP, trusted=False)
    d.add("peer", RawPortTile, at=PEER)
    d.add("spy", RawPortTile, at=SPY)
    d.add("other", RawPortTile, at=OTHER)
    d.route("app", "peer", allow=True)
    d.route("peer", "app")
    kernel.limit("app", RATE)
    kernel.trust("spy")
    d.runtime_route("other", "app")     # granted and revoked at run time (run_time_grants)
    d.runtime_route("app", "spy")
    return d


class Driver:
    """Send messages as the app / peer / spy, and read what each got."""

    def __init__(self, sim, width):
        self.sim, self.width = sim, width

    def send(self, port, flits):
        self.sim.send(message_frame(flits, self.width), port=port)
        self.sim.run(until_idle=True)

    def got(self, port):
        return [frame_message(f.data, self.width) for f in self.sim.received(port, clear=True)]

    def ipc(self, src, dst, payload, msg_type=12):
        hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=src[0], src_y=src[1],
                        msg_type=msg_type)
        return Message(hdr, [], payload).flits(self.width)

    def op(self, msg_type, **fields):
        """A capability operation from the app to its monitor."""
        return kernel_message_flits(self.width, msg_type, KernelMeta(**fields), src=APP,
                                    dst=APP)

    def result(self):
        (flits,) = self.got("app")
        return decode_kernel_message(flits, self.width)[1]

    def alloc(self, size, perm=Perm.RW):
        self.send("app", self.op(K.CAP_ALLOC, size=size, perm=perm))
        meta = self.result()
        assert (meta.op, meta.status, meta.size) == (K.CAP_ALLOC.value, Status.OK, size)
        return meta.handle

    def mem(self, msg_type, handle, offset, size, payload=b""):
        return mem_message_flits(self.width, msg_type, virtual_address(handle, offset), size,
                                 payload, src=APP, dst=(7, 7))

    def fault_log(self, index):
        self.send("spy", kernel_message_flits(self.width, K.FAULT_READ,
                                              KernelMeta(handle=index), src=SPY, dst=ERRORS))
        (flits,) = self.got("spy")
        return decode_kernel_message(flits, self.width)[1]

    def release(self):
        self.send("spy", kernel_message_flits(self.width, K.RELEASE, KernelMeta(
            peer_x=APP[0], peer_y=APP[1], peer_fbits=Fbits.LOCAL0), src=SPY, dst=ERRORS))
        self.sim.run(200)


def allowed_traffic(drv):
    """IPC both ways unchanged and in order; a segment allocated, stored to and loaded from."""
    w = drv.width
    sent = [drv.ipc(APP, PEER, bytes([k]) * (k * 7 + 1)) for k in range(6)]
    for flits in sent:
        drv.sim.send(message_frame(flits, w), port="app")
    drv.sim.run(until_idle=True)
    assert drv.got("peer") == sent
    back = drv.ipc(PEER, APP, b"reply")
    drv.send("peer", back)
    assert drv.got("app") == [back]

    handle = drv.alloc(1000)
    data = bytes(range(200))
    drv.send("app", drv.mem(STORE_MEM, handle, 100, len(data), data))
    (ack,) = drv.got("app")
    header, meta, _ = decode_mem_message(ack, w)
    assert (header.msg_type, meta["addr"], meta["error"]) == (
        STORE_MEM_ACK, virtual_address(handle, 100), 0)
    drv.send("app", drv.mem(LOAD_MEM, handle, 150, 50))
    (ack,) = drv.got("app")
    header, meta, payload = decode_mem_message(ack, w)
    assert (header.msg_type, meta["addr"], payload) == (
        LOAD_MEM_ACK, virtual_address(handle, 150), data[50:100])
    return handle


def violations(drv):
    """``[(kind, make)]``: ``make()`` (run after any release) returns the messages that commit
    the violation and the fields its log entry must have."""
    w = drv.width

    def no_ipc():
        return [drv.ipc(APP, SPY, b"no cap")], {"peer_x": SPY[0], "peer_y": SPY[1], "user": 12}

    def out_of_bounds():
        handle = drv.alloc(64)
        return [drv.mem(STORE_MEM, handle, 60, 8, bytes(8))], {
            "handle": handle, "addr": virtual_address(handle, 60), "size": 8,
            "perm": Perm.WRITE}

    def permission():
        handle = drv.alloc(64, Perm.READ)
        return [drv.mem(STORE_MEM, handle, 0, 4, bytes(4))], {
            "handle": handle, "size": 4, "perm": Perm.WRITE}

    def stale():
        handle = drv.alloc(64)
        drv.send("app", drv.op(K.CAP_FREE, handle=handle))
        assert drv.result().status == Status.OK
        return [drv.mem(LOAD_MEM, handle, 0, 4)], {"handle": handle, "perm": Perm.READ}

    def forged():
        return [drv.op(K.CAP_INSTALL, size=1 << 20)], {"user": K.CAP_INSTALL.value}

    def wider():
        handle = drv.alloc(64)
        return [drv.op(K.CAP_SEND, handle=handle, addr=32, size=64, perm=Perm.READ,
                       peer_x=PEER[0], peer_y=PEER[1], peer_fbits=Fbits.LOCAL0)], {
            "handle": handle, "addr": 32, "size": 64}

    def rate():
        return [drv.ipc(APP, PEER, bytes(w // 8 * 3))] * 24, {}

    return [(FaultKind.NO_IPC_CAP, no_ipc), (FaultKind.OUT_OF_BOUNDS, out_of_bounds),
            (FaultKind.PERMISSION, permission), (FaultKind.STALE_HANDLE, stale),
            (FaultKind.FORGED, forged), (FaultKind.DERIVE_WIDER, wider),
            (FaultKind.RATE, rate)]


def check_kernel(sim, width):
    drv = Driver(sim, width)
    sim.run(50)
    allowed_traffic(drv)
    for index, (kind, make) in enumerate(violations(drv)):
        messages, fields = make()
        drv.got("app")
        for flits in messages:
            drv.sim.send(message_frame(flits, width), port="app")
        sim.run(until_idle=True)
        passed = drv.got("peer")
        if kind == FaultKind.RATE:
            assert 0 < len(passed) < len(messages)      # the bucket's worth went through
        else:
            assert passed == []                         # nothing of the bad message
        assert drv.got("spy") == []
        entry = drv.fault_log(index)
        assert entry.status == Status.OK and entry.root == index + 1, kind
        assert (entry.op, entry.mem_x, entry.mem_y) == (kind, *APP), kind
        for name, value in fields.items():
            assert getattr(entry, name) == value, (kind, name)
        # Quarantined: nothing in or out, but the other tiles are untouched.
        drv.send("app", drv.ipc(APP, PEER, b"after"))
        drv.send("peer", drv.ipc(PEER, APP, b"to app"))
        assert drv.got("peer") == [] and drv.got("app") == []
        assert drv.sim.counters()["app_monitor_quarantined"] == 1
        drv.release()
        ok = drv.ipc(APP, PEER, b"released")
        drv.send("app", ok)
        assert drv.got("peer") == [ok], kind
    counters = sim.counters()
    assert counters["errors_faults"] == 7
    assert counters["app_monitor_faults"] == 7 and counters["app_monitor_quarantined"] == 0
    assert counters["mm_frees"] >= 4                    # released segments went back
    run_time_grants(drv)


def run_time_grants(drv):
    def grant(direction, peer, add):
        drv.send("spy", kernel_message_flits(drv.width, K.IPC_GRANT, KernelMeta(
            status=int(add), perm=direction, peer_x=peer[0], peer_y=peer[1],
            peer_fbits=Fbits.LOCAL0), src=SPY, dst=APP))

    # In: `other` is not routed to the app: sunk and reported, the app not quarantined.
    hello = drv.ipc(OTHER, APP, b"hello")
    drv.send("other", hello)
    assert drv.got("app") == []
    entry = drv.fault_log(7)
    assert (entry.op, entry.peer_x, entry.peer_y, entry.user) == (
        FaultKind.INBOUND, *OTHER, 12 | 1 << 8)
    assert drv.sim.counters()["app_monitor_quarantined"] == 0
    grant(IpcDir.IN, OTHER, True)
    drv.send("other", hello)
    assert drv.got("app") == [hello]
    grant(IpcDir.IN, OTHER, False)
    drv.send("other", hello)
    assert drv.got("app") == []

    # Out: to the spy, granted then taken back (a violation again).
    note = drv.ipc(APP, SPY, b"note")
    grant(IpcDir.OUT, SPY, True)
    drv.send("app", note)
    assert drv.got("spy") == [note]
    grant(IpcDir.OUT, SPY, False)
    drv.send("app", note)
    assert drv.got("spy") == []
    assert drv.fault_log(9).op == FaultKind.NO_IPC_CAP
    assert drv.sim.counters()["app_monitor_quarantined"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_kernel_on_both_backends(backend):
    width = 64
    with open_sim(kernel_design(width), backend, idle_cycles=100) as sim:
        check_kernel(sim, width)
