"""VrIntake (beehive/apps/vr_witness.py) alone, at 64 and 512 bits: every message queued with
its metadata, length, whether it is a UDP segment and its first 48 payload bytes as a VR message
(zero past a short one's end); a message that finds the queue full dropped and counted in
``overflow``; the input never waits."""

import random

import pytest

from beehive.apps.vr_witness import MESSAGE_BYTES, VrIntake, VrMessage, VrType
from beehive.proto.messages import PACKET_META, MsgType
from receiver_feed import run_intake

UDP, OTHER = MsgType.UDP_RX_SEGMENT.value, MsgType.ETH_RX_FRAME.value


def run(width, messages, *, depth=16, take=True, stall=0.0, seed=0):
    """``(requests taken as dicts, overflow, cycles of the last words, cycles out)``."""
    got, counts, ends, outs = run_intake(VrIntake(width, depth), width, messages,
                                         counters=("overflow",), take=take, stall=stall,
                                         seed=seed)
    got = [{"meta": int(p.meta.as_value().value), "length": int(p.length),
            "is_segment": int(p.is_segment),
            "msg": p.msg.as_value().value.to_bytes(MESSAGE_BYTES, "big")} for p in got]
    return got, counts["overflow"], ends, outs


def expected(payload, msg_type, meta):
    return {"meta": meta, "length": len(payload), "is_segment": int(msg_type == UDP),
            "msg": payload[:MESSAGE_BYTES].ljust(MESSAGE_BYTES, b"\0")}


@pytest.mark.parametrize("width", [64, 512])
def test_every_message_is_queued_with_its_head(width):
    rng = random.Random(width)
    good = VrMessage(VrType.PREPARE, shard=3, view=1, op=2, commit=1, client=9, request=4,
                     digest=rng.getrandbits(64)).pack()
    payloads = [good, good[:20], b"", good + bytes(range(50)), bytes(rng.getrandbits(8)
                                                                     for _ in range(48))]
    messages = [(p, UDP, rng.getrandbits(PACKET_META.size)) for p in payloads]
    messages.insert(1, (good, OTHER, rng.getrandbits(PACKET_META.size)))
    got, overflow, _, _ = run(width, messages, stall=0.3, seed=width)
    assert got == [expected(*msg) for msg in messages]
    assert overflow == 0


@pytest.mark.parametrize("width", [64, 512])
def test_a_full_queue_drops_and_counts(width):
    messages = [(bytes([k]) * MESSAGE_BYTES, UDP, k) for k in range(5)]
    _, overflow, _, _ = run(width, messages, depth=2, take=False)
    assert overflow == 3


@pytest.mark.parametrize("width", [64, 512])
def test_latency_from_the_last_word_to_the_queue_output(width):
    message = (bytes(range(MESSAGE_BYTES)), UDP, 1)
    got, _, ends, outs = run(width, [message])
    assert got == [expected(*message)]
    assert outs[0] - ends[0] == 3
