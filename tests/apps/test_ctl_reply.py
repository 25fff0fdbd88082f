"""CtlReply (beehive/apps/kernel_ctl.py) alone, at 64, 128 and 512 bits with a stalling
consumer: after ``start`` it sends exactly the reply the Python model builds (the fault reply of
:func:`fault_reply` or the status reply of :func:`status_reply`), as full words with ``last`` on
the final one, with its ones' complement sum and length."""

import random

import pytest

from apiary.os.uapi import KernelMeta, Status
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import simulate, stream_get
from beehive.apps.kernel_ctl import (FAULT_REPLY_BYTES, STATUS_BAD_REQUEST, STATUS_OK,
                                     STATUS_TIMEOUT, CtlReply, fault_reply, fault_request,
                                     ipc_request, release_request, status_reply)


def random_entry(rng):
    return KernelMeta(op=rng.getrandbits(3), handle=rng.getrandbits(8), addr=rng.getrandbits(48),
                      size=rng.getrandbits(40), perm=rng.getrandbits(2),
                      peer_x=rng.getrandbits(8), peer_y=rng.getrandbits(8),
                      peer_fbits=rng.getrandbits(4), user=rng.getrandbits(9),
                      mem_x=rng.getrandbits(8), mem_y=rng.getrandbits(8),
                      root=rng.getrandbits(16), status=Status.OK)


@pytest.mark.parametrize("width", [64, 128, 512])
def test_replies_are_sent_as_the_model_builds_them(width):
    rng = random.Random(width)
    nb = width // 8
    cases = []                                  # (request, status, long, entry, reply)
    for _ in range(4):
        index, entry = rng.getrandbits(16), random_entry(rng)
        cases.append((fault_request(index), STATUS_OK, 1, entry,
                      fault_reply(index, STATUS_OK, entry.root, entry)))
        cases.append((fault_request(index), STATUS_TIMEOUT, 1, KernelMeta(),
                      fault_reply(index, STATUS_TIMEOUT, 0)))
    for request, status in [(release_request(1, 2), STATUS_OK), (b"\x07", STATUS_BAD_REQUEST),
                            (ipc_request(3, 4, 1, 5, 6, 7), STATUS_OK), (b"", STATUS_BAD_REQUEST)]:
        cases.append((request, status, 0, KernelMeta(), status_reply(request, status)))
    dut = CtlReply(width)

    async def tb(ctx):
        for request, status, long, entry, reply in cases:
            ctx.set(dut.request, int.from_bytes(request[:7], "little"))
            ctx.set(dut.status, status)
            ctx.set(dut.long, long)
            ctx.set(dut.entry.as_value(), entry.pack())
            assert ctx.get(dut.payload_bytes) == len(reply)
            assert ctx.get(dut.l4_sum) == ones_complement_sum(reply)
            ctx.set(dut.start, 1)
            assert not ctx.get(dut.o.valid)
            await ctx.tick()
            ctx.set(dut.start, 0)
            assert ctx.get(dut.o.valid)         # the cycle after start
            words = []
            while not words or not words[-1].last:
                words.append(await stream_get(ctx, dut.o, rng=rng, stall=0.4))
            assert len(words) == -(-len(reply) // nb)
            assert all(int(w.nbytes) == nb for w in words)
            sent = b"".join(int(w.data).to_bytes(nb, "little") for w in words)
            assert sent[:len(reply)] == reply and not any(sent[len(reply):])
            assert not ctx.get(dut.o.valid)     # done until the next start
            assert len(reply) in (FAULT_REPLY_BYTES, 8)

    simulate(dut, tb, timeout=5000)
