"""CtlIntake (beehive/apps/kernel_ctl.py) alone, at 64 and 512 bits: each UDP segment's
metadata, first 7 bytes and length (up to 7) queued in order; messages of another type dropped
and counted in ``stray``; a request that finds the queue full dropped and counted in
``overflow``; the input never waits."""

import random

import pytest

from beehive.apps.kernel_ctl import CtlIntake
from beehive.proto.messages import PACKET_META, MsgType
from receiver_feed import run_intake

UDP, OTHER = MsgType.UDP_RX_SEGMENT.value, MsgType.ETH_RX_FRAME.value


def expected(payload, meta):
    return {"meta": meta, "bytes": int.from_bytes(payload[:7], "little"),
            "length": min(len(payload), 7)}


def run(width, messages, *, depth=16, take=True, stall=0.0, seed=0):
    """``(requests taken, stray, overflow, cycles of the last words, cycles out)``."""
    got, counts, ends, outs = run_intake(CtlIntake(width, depth), width, messages,
                                         counters=("stray", "overflow"), take=take,
                                         stall=stall, seed=seed)
    got = [{"meta": int(p.meta), "bytes": int(p.bytes), "length": int(p.length)} for p in got]
    return got, counts["stray"], counts["overflow"], ends, outs


def random_meta(rng):
    return rng.getrandbits(PACKET_META.size)


@pytest.mark.parametrize("width", [64, 512])
def test_segments_are_queued_and_other_messages_dropped(width):
    rng = random.Random(width)
    payloads = [b"", b"\x01", bytes(range(3)), bytes(range(7)), bytes(range(100)),
                bytes(rng.getrandbits(8) for _ in range(70))]
    messages = [(p, UDP, random_meta(rng)) for p in payloads]
    messages.insert(2, (b"an ethernet frame", OTHER, random_meta(rng)))
    messages.append((b"", OTHER, random_meta(rng)))
    got, stray, overflow, _, _ = run(width, messages, stall=0.3, seed=width)
    assert got == [expected(p, meta) for p, t, meta in messages if t == UDP]
    assert (stray, overflow) == (2, 0)


@pytest.mark.parametrize("width", [64, 512])
def test_a_full_queue_drops_and_counts(width):
    rng = random.Random(1)
    messages = [(bytes([k]) * 9, UDP, random_meta(rng)) for k in range(5)]
    got, stray, overflow, _, _ = run(width, messages, depth=2, take=False)
    assert (stray, overflow) == (0, 3)


@pytest.mark.parametrize("width", [64, 512])
def test_a_request_is_on_o_two_cycles_after_its_last_word(width):
    messages = [(b"\x02\x01\x02\x08", UDP, 5)]
    got, _, _, ends, outs = run(width, messages)
    assert got == [expected(b"\x02\x01\x02\x08", 5)]
    assert outs[0] - ends[0] == 2
