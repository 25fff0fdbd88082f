"""CtlDecoder (beehive/apps/kernel_ctl.py) alone: for every op and random (short, long, bad)
requests, ``bad`` is exactly the Python model's :func:`request_ok` refusing it, and a good
request's kernel message (type, destination, metadata) is the one the module docstring gives."""

import random

from amaranth.sim import Simulator

from apiary.noc.header import Fbits
from apiary.os.uapi import IpcDir, KernelMeta, KernelMsgType
from apiary.tile import Endpoint
from beehive.apps.kernel_ctl import (OP_FAULT_READ, OP_IPC_GRANT, OP_IPC_REVOKE, OP_RELEASE,
                                     CtlDecoder, fault_request, ipc_request, release_request,
                                     request_ok)

ERRORS = (2, 2)


def kernel_message(payload):
    """``(msg_type, (x, y, fbits), KernelMeta)`` of a well-formed request."""
    op = payload[0]
    if op == OP_FAULT_READ:
        return KernelMsgType.FAULT_READ.value, (*ERRORS, Fbits.LOCAL0), KernelMeta(
            handle=payload[2])
    if op == OP_RELEASE:
        return KernelMsgType.RELEASE.value, (*ERRORS, Fbits.LOCAL0), KernelMeta(
            peer_x=payload[1], peer_y=payload[2], peer_fbits=payload[3])
    return KernelMsgType.IPC_GRANT.value, (payload[1], payload[2], Fbits.LOCAL0), KernelMeta(
        status=int(op == OP_IPC_GRANT), perm=payload[3], peer_x=payload[4], peer_y=payload[5],
        peer_fbits=payload[6])


def requests(rng):
    out = [b"", bytes([OP_FAULT_READ]), fault_request(0), fault_request(300),
           release_request(1, 2), release_request(1, 2, 15), release_request(1, 2)[:3],
           bytes([OP_RELEASE, 1, 2, 16]), ipc_request(1, 2, IpcDir.OUT, 3, 4),
           ipc_request(5, 6, IpcDir.IN, 7, 8, 15, grant=False), ipc_request(1, 2, 3, 3, 4),
           ipc_request(1, 2, IpcDir.IN, 3, 4)[:6], bytes([OP_IPC_REVOKE, 1, 2, 1, 3, 4, 16]),
           bytes([9, 1, 2, 3]), bytes([0] * 7)]
    for _ in range(300):
        op = rng.choice([0, 1, 2, 3, 4, 5, rng.getrandbits(8)])
        rest = bytes(rng.choice([0, 1, 2, 3, 15, 16, rng.getrandbits(8)]) for _ in range(8))
        out.append((bytes([op]) + rest)[:rng.randrange(10)])
    return out


def test_decoding_matches_the_python_model():
    dut = CtlDecoder(Endpoint("errors", *ERRORS))
    cases = requests(random.Random(0))
    assert sum(map(request_ok, cases)) > 40

    async def tb(ctx):
        for payload in cases:
            ctx.set(dut.bytes, int.from_bytes(payload[:7], "little"))
            ctx.set(dut.length, min(len(payload), 7))
            assert ctx.get(dut.bad) == (not request_ok(payload)), payload.hex()
            if ctx.get(dut.bad):
                continue
            assert ctx.get(dut.read) == (payload[0] == OP_FAULT_READ)
            assert ctx.get(dut.release) == (payload[0] == OP_RELEASE)
            msg_type, dst, meta = kernel_message(payload)
            assert ctx.get(dut.k_type) == msg_type
            got = ctx.get(dut.k_dst)
            assert (got.x, got.y, got.fbits) == dst
            assert KernelMeta.unpack(ctx.get(dut.k_meta.as_value())) == meta

    sim = Simulator(dut)            # combinational: no clock
    sim.add_testbench(tb)
    sim.run()
