"""FLD's compressed descriptors (flexdriver/descriptors.py): the hardware expands 8-byte transmit
descriptors into exactly the WQE bytes the NIC model reads, and keeps 15 bytes of a completion
from which the completion comes back whole."""

import random

from amaranth.sim import Simulator

from flexdriver.descriptors import (CQE_COMPACT, TX_DESC, CqeCompressor, WqeExpander,
                                    compress_cqe, expand_cqe, expand_tx)
from flexdriver.formats import CQE_ERROR, CQE_FILLER, CQE_RECV, CQE_SEND, Cqe, TxWqe

WINDOW = 0x0000_2000_0000_0000           # the transmit buffer, as the NIC addresses it


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def test_a_compressed_descriptor_expands_into_the_wqe_the_nic_reads():
    rng = random.Random(1)
    dut = WqeExpander(WINDOW)
    cases = [({"buffer": rng.getrandbits(24), "length": rng.randrange(60, 9000),
               "queue": rng.getrandbits(12), "flags": rng.getrandbits(3)}, rng.getrandbits(16))
             for _ in range(200)]

    async def bench(ctx):
        for desc, index in cases:
            ctx.set(dut.desc, desc)
            ctx.set(dut.index, index)
            wqe = ctx.get(dut.wqe).to_bytes(64, "little")
            assert wqe == expand_tx(desc, index, WINDOW).pack()
            assert TxWqe.unpack(wqe).address == WINDOW + 64 * desc["buffer"]

    run(dut, bench)
    assert TX_DESC.size // 8 == 8


def test_a_completion_keeps_15_bytes_and_comes_back_whole():
    rng = random.Random(2)
    dut = CqeCompressor()
    cqes = [Cqe(rng.choice([CQE_SEND, CQE_RECV, CQE_ERROR]), rng.getrandbits(1),
                rng.getrandbits(16), rng.getrandbits(12), rng.getrandbits(14),
                rng.getrandbits(32), rng.getrandbits(24), rng.getrandbits(6),
                rng.getrandbits(4), rng.getrandbits(8)) for _ in range(200)]
    cqes.append(Cqe(CQE_FILLER, 1, 3, 0, 4096, stride=17))

    async def bench(ctx):
        for cqe in cqes:
            ctx.set(dut.cqe, int.from_bytes(cqe.pack(), "little"))
            compact = ctx.get(dut.compact)
            fields = {name: int(getattr(compact, name)) for name in compress_cqe(cqe)}
            assert fields == compress_cqe(cqe)
            assert expand_cqe(fields, owner=ctx.get(dut.owner)) == cqe
            assert fields["stride"] == cqe.stride               # (a striding queue's)

    run(dut, bench)
    assert CQE_COMPACT.size // 8 == 15
