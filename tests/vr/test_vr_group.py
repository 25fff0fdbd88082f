"""The Python VR group (beehive/vr/) with the software witness: a seeded 90/10 workload gives
the same results as a plain dict; the replica and the witness end with the leader's state; the
group survives the witness's death, the replica's, and the leader's (a view change through the
witness), and refuses to go on when no quorum is left."""

import pytest

from beehive.apps.vr_witness import VrMessage, VrType
from beehive.vr.group import Group, LostOps, NoQuorum, run_workload
from beehive.vr.kv import KvOp, reference_results, workload
from beehive.vr.links import LocalWitness
from beehive.vr.witness import SoftwareWitness


def software_group(shard=0):
    witness = SoftwareWitness(shard=shard)
    return Group(LocalWitness(witness), shard=shard), witness


def test_the_workload_is_seeded_90_10_with_64_byte_keys_and_values():
    ops = list(workload(7, 2000, keys=50))
    assert ops == list(workload(7, 2000, keys=50)) and ops != list(workload(8, 2000, keys=50))
    reads = sum(op.value is None for op in ops)
    assert 0.87 < reads / len(ops) < 0.93
    assert all(len(op.key) == 64 for op in ops) and {len(op.value) for op in ops
                                                     if op.value} == {64}
    assert len({op.key for op in ops}) == 50


def test_a_seeded_workload_gives_the_dicts_results_and_every_member_agrees():
    ops = list(workload(1, 300, keys=40))
    group, witness = software_group(shard=2)
    results = list(run_workload(group, ops, clients=3))
    assert results == reference_results(ops)
    assert any(r not in (None, b"OK") for r in results)       # reads that found values
    replica = group.replica
    assert replica is not None
    assert group.op == group.commit == replica.op == replica.commit == witness.op == 300
    assert witness.commit == 300 and witness.summary == group.summary == replica.summary
    assert replica.machine.store.data == group.machine.store.data
    assert witness.counters["prepares"] == 300 and witness.counters["nacks"] == 0
    assert group.stats["witness_acks"] == group.stats["replica_acks"] == 300


def test_a_retransmitted_request_is_answered_from_the_client_table():
    group, witness = software_group()
    key = b"k" * 64
    assert group.submit(1, 1, KvOp(key, b"a" * 64)) == b"OK"
    assert group.submit(1, 1, KvOp(key, b"b" * 64)) == b"OK"         # the same request again
    assert group.submit(1, 2, KvOp(key)) == b"a" * 64 and witness.op == 2


def test_the_group_survives_its_witness_dying_and_catches_it_up_when_it_returns():
    ops = list(workload(2, 120, keys=20))
    group, witness = software_group()
    link = group.witness
    assert isinstance(link, LocalWitness)
    results = list(run_workload(group, ops[:40]))
    link.alive = False                                   # the witness crashes
    results += run_workload(group, ops[40:80])
    assert witness.op == 40 and group.stats["witness_misses"] == 40
    link.alive = True                                    # back, 40 ops behind: GAP, resent
    results += run_workload(group, ops[80:])
    assert results == reference_results(ops)
    assert witness.op == 120 and group.stats["resent"] == 41     # 40 missed, then op 81
    assert witness.summary == group.summary


def test_the_group_survives_its_replica_dying():
    ops = list(workload(3, 60, keys=20))
    group, witness = software_group()
    results = list(run_workload(group, ops[:30]))
    group.fail_replica()
    results += run_workload(group, ops[30:])
    assert results == reference_results(ops) and witness.op == 60


def test_a_view_change_makes_the_replica_leader_with_the_witness():
    ops = list(workload(4, 80, keys=20))
    group, witness = software_group()
    results = list(run_workload(group, ops[:50]))
    group.fail_leader()
    assert group.view == witness.view == witness.normal_view == 1
    assert witness.counters["view_changes"] == witness.counters["start_views"] == 1
    results += run_workload(group, ops[50:])              # the new leader serves
    assert results == reference_results(ops)
    assert witness.op == 80 and witness.summary == group.summary
    # The old leader, back from the dead, is refused by the witness.
    stale = VrMessage(VrType.PREPARE, view=0, op=81).pack()
    assert VrMessage.unpack(witness.handle(stale)).type is VrType.NACK


def test_without_a_quorum_nothing_commits():
    group, witness = software_group()
    group.fail_replica()
    group.witness.alive = False                          # type: ignore[attr-defined]
    with pytest.raises(NoQuorum):
        group.submit(0, 1, KvOp(b"k" * 64, b"v" * 64))
    group.witness.alive = True                           # type: ignore[attr-defined]
    assert group.submit(0, 2, KvOp(b"k" * 64)) is None   # the failed put never happened


def test_a_view_change_refuses_to_lose_ops_only_the_dead_leader_held():
    group, witness = software_group()
    list(run_workload(group, workload(6, 10, keys=5)))
    group.fail_replica()                                 # a first failure ...
    list(run_workload(group, workload(7, 5, keys=5)))    # committed by leader + witness
    assert group.replica is not None
    group.replica.alive = True                           # ... back, 5 ops behind
    with pytest.raises(LostOps, match="ops up to 15 committed, the replica's bytes end at op 10"):
        group.fail_leader()                              # ... and then the leader dies
