"""VrRules and VrUpdate (beehive/apps/vr_witness.py) together, alone: for random witness
states, ring entries and messages (malformed, for another shard, of every type, in and out of
view and order), what they decide is what the software witness (the golden model) does: the
message dropped or not, the reply (NACK reason, type, every field), the counters it moves and
the state after."""

import random

from amaranth import Elaboratable, Module
from amaranth.sim import Simulator

from beehive.apps.vr_witness import (MAGIC, MESSAGE_BYTES, VR_MESSAGE, VrMessage, VrRules,
                                     VrStatus, VrType, VrUpdate)
from beehive.vr.witness import LogEntry, SoftwareWitness

SHARD, DEPTH = 3, 8


class Decide(Elaboratable):
    """VrRules and VrUpdate wired as in the tile: the request, state and entry shared."""

    def __init__(self):
        self.rules, self.update = VrRules(SHARD), VrUpdate(SHARD)

    def elaborate(self, platform):
        m = Module()
        rules, update = self.rules, self.update
        m.submodules.rules, m.submodules.update = rules, update
        m.d.comb += [update.msg.eq(rules.request.msg), update.state.eq(rules.state),
                     update.entry.eq(rules.entry), update.act.eq(rules.act)]
        return m


def random_case(rng):
    """``(state, entry, payload, is_segment)``: a witness state, the ring entry read for the
    message (a dict of op, client, request, digest) and the datagram."""
    view = rng.randrange(6)
    op = rng.randrange(20)
    state = {"view": view, "normal_view": rng.randrange(view + 1), "op": op,
             "commit": rng.randrange(op + 1), "summary": rng.getrandbits(64),
             "in_view_change": int(rng.random() < 0.3)}
    kind = rng.choice([*VrType, *VrType, 0, 10])
    msg_op = max(0, op + rng.choice([-9, -1, 0, 0, 1, 1, 1, 2, 3]))
    fields = dict(magic=MAGIC if rng.random() < 0.95 else 0xB2,
                  type=int(kind), shard=SHARD if rng.random() < 0.95 else SHARD + 1,
                  status=rng.choice([0, 0, 0, 1, 1, 2]), reason=rng.choice([0] * 8 + [3, 7]),
                  view=max(0, view + rng.choice([-1, 0, 0, 0, 1, 2])),
                  normal_view=rng.randrange(4), op=msg_op,
                  commit=max(0, msg_op - rng.randrange(-2, 4)), client=rng.getrandbits(32),
                  request=rng.getrandbits(32), digest=rng.getrandbits(64))
    payload = VR_MESSAGE.to_bytes(**fields)
    if rng.random() < 0.05:
        payload = payload[:rng.randrange(MESSAGE_BYTES)]
    elif rng.random() < 0.03:
        payload += b"more"
    at = msg_op if kind == VrType.LOG_QUERY else op        # the op whose slot is read
    entry_op = rng.choice([at, at, at - DEPTH, 0]) if at >= DEPTH else rng.choice([at, at, 0])
    entry = {"op": entry_op, "client": rng.getrandbits(32), "request": rng.getrandbits(32),
             "digest": rng.getrandbits(64)}
    return state, entry, payload, int(rng.random() < 0.97)


def model(state, entry, payload, is_segment):
    """``(dropped, counters moved, reply or None, state after)`` by the software witness."""
    w = SoftwareWitness(shard=SHARD, log_depth=DEPTH)
    w.view, w.normal_view, w.op = state["view"], state["normal_view"], state["op"]
    w.commit, w.summary = state["commit"], state["summary"]
    w.status = VrStatus.VIEW_CHANGE if state["in_view_change"] else VrStatus.NORMAL
    w.ring[entry["op"] % DEPTH] = LogEntry(**entry)
    before = dict(w.counters)
    reply = w.receive(payload) if is_segment else None
    moved = {k for k in w.counters if w.counters[k] != before[k]}
    after = {"view": w.view, "normal_view": w.normal_view, "op": w.op, "commit": w.commit,
             "summary": w.summary, "in_view_change": int(w.status == VrStatus.VIEW_CHANGE)}
    return not is_segment or "dropped" in moved, moved - {"dropped"}, reply, after


def test_the_decision_matches_the_software_witness():
    rng = random.Random(0)
    cases = [random_case(rng) for _ in range(1000)]
    dut = Decide()
    rules, update = dut.rules, dut.update
    seen = set()

    async def tb(ctx):
        for state, entry, payload, is_segment in cases:
            msg = payload[:MESSAGE_BYTES].ljust(MESSAGE_BYTES, b"\0")
            ctx.set(rules.request, {"length": len(payload), "is_segment": is_segment})
            ctx.set(rules.request.msg.as_value(), int.from_bytes(msg, "big"))
            ctx.set(rules.state, state)
            ctx.set(rules.entry, entry)
            dropped, moved, reply, after = model(state, entry, payload, is_segment)
            assert ctx.get(rules.drop) == dropped
            if dropped:
                continue
            act = ctx.get(rules.act)
            got = {name for name, flag in [
                ("nacks", act.reason != 0), ("prepares", act.accept_prepare),
                ("commits", act.apply_commit), ("view_changes", act.begin_change),
                ("start_views", act.adopt_view), ("queries", act.reply == VrType.LOG_ENTRY)]
                if flag}
            assert got == moved
            seen.update(moved)
            assert (act.reason != 0 or act.reply != 0) == (reply is not None)
            if reply is not None:
                answer = ctx.get(update.answer.as_value()).to_bytes(MESSAGE_BYTES, "big")
                assert VrMessage.unpack(answer) == reply
            assert {k: getattr(ctx.get(update.after), k) for k in after} == after

    sim = Simulator(dut)            # combinational: no clock
    sim.add_testbench(tb)
    sim.run()
    assert seen == {"nacks", "prepares", "commits", "view_changes", "start_views", "queries"}
