"""The fault matrix (``apiary bench faults``): what one tenant's fault costs the other."""

import pytest

from apiary.bench.faults import FAULTS, FaultRun, markdown, matrix
from apiary.os.uapi import FaultKind

HUNG, ENDLESS, FLOOD, IPC, MEMORY, FORGED, SPOOFED = FAULTS
LIMIT = 256


def test_the_table_floors_the_share_and_marks_what_does_not_apply():
    solo = FaultRun(delivered=3000, worst_wait=40, lost=0)
    runs = {HUNG: FaultRun(delivered=2999, worst_wait=300, lost=0, fault_kind=FaultKind.STALLED,
                           to_quarantine=280, to_open=29, to_serve=64),
            SPOOFED: FaultRun(delivered=3000, worst_wait=40, lost=0, notes=["no fault"])}
    table = markdown(solo, runs, LIMIT)
    assert f"| {HUNG} | STALLED | 99.9 % | 300 | 0 | 280 | 29 / 64 |" in table
    assert f"| {SPOOFED} (no fault) | — | 100.0 % | 40 | 0 | — | — |" in table
    assert "`stall_limit` 256 cycles" in table


@pytest.mark.slow
def test_every_fault_is_quarantined_in_its_bound_and_the_tenant_loses_nothing():
    solo, runs = matrix("verilator", LIMIT)
    assert solo.lost == 0 and solo.delivered > 0
    for kind, run in runs.items():
        assert run.lost == 0, kind
    # Violations are caught within a few cycles of the offending frame, and cost nothing.
    for kind, logged in ((IPC, FaultKind.NO_IPC_CAP), (MEMORY, FaultKind.OUT_OF_BOUNDS),
                         (FORGED, FaultKind.FORGED), (FLOOD, FaultKind.RATE)):
        run = runs[kind]
        assert run.fault_kind == logged, kind
        assert run.to_quarantine is not None and run.to_quarantine < 100, kind
        assert run.delivered == solo.delivered and run.worst_wait == solo.worst_wait, kind
        assert run.to_serve is not None and run.to_open < run.to_serve < 200, kind
    # A tile that only stops is stopped within the limit; the tenant waits that long, once.
    for kind, logged in ((HUNG, FaultKind.STALLED), (ENDLESS, FaultKind.UNFINISHED)):
        run = runs[kind]
        assert run.fault_kind == logged, kind
        assert LIMIT <= run.to_quarantine < LIMIT + 100, kind
        assert solo.worst_wait < run.worst_wait < LIMIT + 200, kind
        assert run.to_open is not None, kind
    assert runs[HUNG].to_serve is not None
    # A spoofed source is rewritten, not a fault.
    assert runs[SPOOFED].fault_kind is None and runs[SPOOFED].to_quarantine is None
    assert runs[SPOOFED].notes and runs[SPOOFED].delivered == solo.delivered


@pytest.mark.slow
def test_with_receive_buffers_a_hung_tile_costs_the_tenant_nothing():
    """Each monitor with a 128-flit receive buffer: the memory tile's answer to the hung tile
    (512 bytes, 66 flits) waits in the hung tile's buffer, not in the memory tile, so the tenant
    gets all it gets alone and waits at most the time the memory tile spends on that answer
    more (without buffers it waits about the limit: the test above), while the stall watch
    still quarantines the hung tile, which leaves the answer untaken, within its limit. (With
    64 flits the answer does not fit and is dropped: nothing waits for the tile, and it is not
    quarantined.)"""
    solo, runs = matrix("verilator", LIMIT, faults=[HUNG], rx_buffer_flits=128)
    run = runs[HUNG]
    assert (run.delivered, run.lost) == (solo.delivered, 0)
    assert solo.worst_wait < run.worst_wait < solo.worst_wait + 100 < LIMIT
    # The watch counts from the answer's first flit offered to the tile, after the buffer has
    # taken it whole: about 130 cycles after the load.
    assert run.fault_kind == FaultKind.STALLED and LIMIT <= run.to_quarantine < LIMIT + 200
    assert run.to_serve is not None
    assert "128-flit receive buffer each" in markdown(solo, runs, LIMIT, 128)
