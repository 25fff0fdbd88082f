"""The VR group with the FPGA witness: examples/vr_witness.py simulated (the witness tile behind
the network stack and its Apiary monitor), reached with scapy frames through the design's MAC
port. A seeded workload gives the same results as the all-software group; the witness's state
ends as the software witness's; and when the witness is quarantined (its IPC capability to send
to UDP TX revoked over the kernel's control port, so its next reply is a violation) the group
keeps completing requests on the replica's votes, and the fault log names the witness."""

import pathlib

import pytest

from apiary.design import DesignError
from apiary.load import load_design
from apiary.os.uapi import FaultKind, IpcDir
from apiary.sim import open_sim
from beehive.apps.kernel_ctl import fault_request, ipc_request, parse_reply
from beehive.apps.vr_witness import VrMessage, VrType
from beehive.vr.group import Group, run_workload
from beehive.vr.kv import reference_results, workload
from beehive.vr.links import LocalWitness, SimWitness
from beehive.vr.witness import COUNTERS, SoftwareWitness


ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "vr_witness.py")
BASE_PORT, CTL_PORT = 9000, 7100


def vr_design(width=64, shards=1):
    return load_design(EXAMPLE, width=width, shards=shards)


def software_run(ops, shard=0):
    witness = SoftwareWitness(shard=shard)
    group = Group(LocalWitness(witness), shard=shard)
    return list(run_workload(group, ops)), group, witness


def fpga_run(sim, ops, shard=0):
    link = SimWitness(sim, BASE_PORT + shard)
    group = Group(link, shard=shard)
    return list(run_workload(group, ops)), group, link


def test_the_design_places_untrusted_witnesses_and_is_sound():
    for shards in (1, 4):
        design = vr_design(shards=shards)
        assert "no deadlock" in design.check().summary()
        for shard in range(shards):
            tile = design.tiles[f"vr{shard}"]
            assert tile.cls.__name__ == "VrWitnessTile" and tile.params["shard"] == shard
            assert not tile.trusted
    with pytest.raises(DesignError, match="shards must be an integer from 1 to 8"):
        vr_design(shards=0)


def check_against_software(sim, ops):
    results, group, link = fpga_run(sim, ops)
    expected, soft_group, soft_witness = software_run(ops)
    assert results == expected == reference_results(ops)
    assert group.summary == soft_group.summary
    # The tile's counters are the software witness's.
    counters = sim.counters()
    assert {n: counters[f"vr0_{n}"] for n in COUNTERS} == soft_witness.counters
    assert all(e.cycles is not None for e in link.exchanges if e.cycle_out is not None)
    return link


def test_a_small_workload_against_the_simulated_witness_pysim():
    ops = list(workload(5, 2, keys=2))
    with open_sim(vr_design(), "pysim", idle_cycles=150) as sim:
        link = check_against_software(sim, ops)
    assert len(link.exchanges) == 3                  # 2 prepares and a heartbeat


@pytest.mark.slow
def test_a_seeded_workload_against_the_simulated_witness_verilator():
    """At 64 bits (the witness tile alone runs at 512 too: tests/apps/test_vr_witness.py)."""
    ops = list(workload(11, 60, keys=16))
    with open_sim(vr_design(64), "verilator", idle_cycles=150) as sim:
        link = check_against_software(sim, ops)
    cycles = [e.cycles for e in link.exchanges if e.cycles is not None]
    assert len(cycles) == 60 and max(cycles) < 400


@pytest.mark.slow
def test_a_quarantined_witness_leaves_the_group_serving_verilator():
    ops = list(workload(12, 60, keys=16))
    with open_sim(vr_design(), "verilator", idle_cycles=150) as sim:
        link = SimWitness(sim, BASE_PORT)
        group = Group(link)
        results = list(run_workload(group, ops[:20]))
        assert group.stats["witness_acks"] == 20
        x, y = sim.design.tiles["vr0"].at
        tx_x, tx_y = sim.design.tiles["udp_tx"].at
        revoke = ipc_request(x, y, IpcDir.OUT, tx_x, tx_y, grant=False)
        assert parse_reply(link.exchange(revoke, dport=CTL_PORT))["status"] == 0
        results += run_workload(group, ops[20:])             # the witness's reply faults
        assert results == reference_results(ops)
        assert group.stats["witness_acks"] == 20 and group.stats["witness_misses"] == 40
        counters = sim.counters()
        assert counters["vr0_prepares"] == 21               # it logged one more, then silence
        fault = parse_reply(link.exchange(fault_request(0), dport=CTL_PORT))
        assert (fault["x"], fault["y"], fault["kind"]) == (x, y, FaultKind.NO_IPC_CAP)
        assert fault["total"] == 1
        # Quarantined: nothing gets in or out any more; the replica holds the log.
        assert link.request(VrMessage(VrType.LOG_QUERY, op=1).pack()) is None
        assert group.replica is not None and group.replica.op == 60


@pytest.mark.slow
def test_the_docs_snippet_runs(monkeypatch):
    import re
    monkeypatch.chdir(ROOT)
    text = (ROOT / "docs" / "vr-witness.md").read_text()
    snippet = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    assert "SimWitness" in snippet and "reference_results" in snippet
    exec(compile(snippet, "docs/vr-witness.md", "exec"), {})
