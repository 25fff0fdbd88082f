"""OfferOnce (beehive/apps/kernel_ctl.py) alone: a transfer offered once per message, whatever
the consumer's ready does, and offered again after ``start``."""

from apiary.stream.testbench import simulate
from beehive.apps.kernel_ctl import OfferOnce


def run(steps):
    """Drive ``(start, offer, ready)`` one cycle each; the ``valid`` seen in each cycle."""
    dut = OfferOnce()
    seen = []

    async def tb(ctx):
        for start, offer, ready in steps:
            ctx.set(dut.start, start)
            ctx.set(dut.offer, offer)
            ctx.set(dut.ready, ready)
            seen.append(ctx.get(dut.valid))
            await ctx.tick()

    simulate(dut, tb, timeout=100)
    return seen


def test_valid_follows_offer_until_the_transfer():
    # offered, not taken (ready low), taken, then never again however long it is offered
    seen = run([(0, 0, 1), (0, 1, 0), (0, 1, 0), (0, 1, 1), (0, 1, 1), (0, 1, 0), (0, 0, 1)])
    assert seen == [0, 1, 1, 1, 0, 0, 0]


def test_ready_without_offer_is_no_transfer():
    seen = run([(0, 0, 1), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 1)])
    assert seen == [0, 0, 1, 1, 0]


def test_start_offers_again_from_the_next_cycle():
    seen = run([(0, 1, 1), (0, 1, 1), (1, 1, 0), (0, 1, 0), (0, 1, 1), (0, 1, 1)])
    # taken in cycle 0; the start in cycle 2 re-arms it for cycle 3; taken again in cycle 4
    assert seen == [1, 0, 0, 1, 1, 0]


def test_a_start_wins_over_a_transfer_in_the_same_cycle():
    seen = run([(0, 1, 1), (1, 0, 0), (1, 1, 1), (0, 1, 0), (0, 1, 1), (0, 1, 0)])
    assert seen == [1, 0, 1, 1, 1, 0]
