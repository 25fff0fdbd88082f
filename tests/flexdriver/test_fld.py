"""The FLD module (flexdriver/fld.py, Amaranth's simulator) under the NIC model with a testbench
accelerator: two receive queues steered by the operator's rules (one tagging a context ID),
sharing one striding ring of buffers answered on the fly; an accelerator that stops taking one
queue's packets loses only those (counted under that queue), the other queue's packets all
arrive, in order, intact, with their context and checks; every buffer goes round several times,
given back one ring doorbell a buffer."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.testbench import simulate
from flexdriver.control import OPERATOR, FldControl
from flexdriver.fld import Fld, FldMap
from flexdriver.formats import IP_OK, IS_IPV4, IS_UDP, L4_OK
from flexdriver.nic import NicModel, Rule
from flexdriver.sim import FldLink, buffers_closed, read_count

MAP = FldMap(queues=2, rx_queues=2, ring_entries=8, pool_entries=8, buffers=4,
             buffer_bytes=2048, stride_bytes=256, rq_entries=8, rx_cq_entries=16)


def frames(rng, n, port):
    return [bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5000 + i, dport=port)
                  / bytes(rng.getrandbits(8) for _ in range(rng.randrange(18, 1200))))
            for i in range(n)]


def run(width, sent, accept):
    """``sent`` into the NIC's wire, one every 250 cycles; the accelerator takes queue ``q``'s
    packets while ``accept(cycle)`` has bit ``q``. Returns the packets it got (``(queue,
    frame, context, checks)``), FLD's drops by queue and the NIC model."""
    fld = Fld(width, MAP)
    link = FldLink(fld)
    nic = link.nic = NicModel(link, latency=30, jitter=6, seed=width)
    control = FldControl(nic, MAP)
    control.create_queues()
    control.add_rule(Rule({"dst_port": 7}, queue=0), tenant="alice")
    control.add_rule(Rule({"dst_port": 9}, queue=1, context=0x42), tenant=OPERATOR)
    nb = width // 8
    got, out = [], {}

    async def wire(ctx):
        await ctx.tick().repeat(200)
        for frame in sent:
            nic.receive(frame)
            await ctx.tick().repeat(250)
        await ctx.tick().repeat(3000)
        out["dropped"] = [read_count(ctx, fld.rx_dropped_queue, fld.rx_dropped, q)
                          for q in range(2)]

    async def accelerator(ctx):
        ctx.set(fld.rx.ready, 1)
        current, cycle = b"", 0
        while True:
            ctx.set(fld.rx_accept, accept(cycle))
            word = ctx.get(fld.rx.payload) if ctx.get(fld.rx.valid) else None
            await ctx.tick()
            cycle += 1
            if word is None:
                continue
            current += int(word.data).to_bytes(nb, "little")[:word.nbytes]
            if word.last:
                got.append((int(word.meta.queue), current, int(word.meta.context),
                            int(word.meta.checks)))
                current = b""

    simulate(fld, wire, background=[link.run, accelerator], timeout=120_000)
    return got, out["dropped"], nic


@pytest.mark.parametrize("width", [64, 512])
def test_a_slow_queue_loses_only_its_own_packets(width):
    rng = random.Random(width)
    fast, slow = frames(rng, 12, 7), frames(rng, 12, 9)
    sent = [f for pair in zip(fast, slow) for f in pair]
    # The accelerator stops taking queue 1 for a while (about 5 of its packets), never queue 0.
    busy = range(200 + 250 * 8, 200 + 250 * 18)
    got, dropped, nic = run(width, sent, lambda cycle: 0b01 if cycle in busy else 0b11)
    q0 = [g for g in got if g[0] == 0]
    q1 = [g for g in got if g[0] == 1]
    assert [g[1] for g in q0] == fast and dropped[0] == 0
    assert {(g[2], g[3]) for g in q0} == {(0, IS_IPV4 | IS_UDP | IP_OK | L4_OK)}
    assert dropped[1] >= 4 and len(q1) == 12 - dropped[1]
    assert [g[1] for g in q1] == [f for f in slow if f in [g[1] for g in q1]]     # in order
    assert {g[2] for g in q1} == {0x42}                      # the operator's context tag
    assert nic.counters.out_of_buffer == {}                  # every buffer came back
    assert nic.counters.rx_packets == {0: 12, 1: 12}
    closed = closed_buffers([len(f) for f in sent])
    assert closed >= 2 * MAP.buffers and nic.rqs[0].producer == MAP.buffers + closed
    assert nic.rqs[0].consumer == closed + 1                 # (the last one partly filled)


def closed_buffers(sizes):
    """How many of MAP's buffers frames of ``sizes`` fill."""
    return buffers_closed(sizes, MAP.buffer_bytes, MAP.stride_bytes)
