"""The scaling model of `python -m harness.sweep.scaling`: LPT placement and the projection
from a one-worker run."""

from harness.sweep.scaling import Measured, makespan, project, report


def test_makespan_places_longest_first():
    # LPT: 5, 4, then each 3 to the worker free first: 5+3 | 4+3+3 = 10 (the best is 9: 5+4 |
    # 3+3+3; LPT is within 4/3 of it, and is what a queue taken longest first gives).
    assert makespan([5, 4, 3, 3, 3], 2) == 10
    assert makespan([5, 4, 3, 3, 3], 1) == 18
    assert makespan([2, 2, 2], 100) == 2
    assert makespan([], 4) == 0


def test_projection_is_start_up_plus_the_placement_of_measured_jobs():
    serial = Measured(1, wall=27.0, job_seconds=[10.0, 8.0, 6.0], failed=0)   # 3 s start-up
    assert project(serial, 1) == 27.0
    assert project(serial, 2) == 3.0 + 14.0                      # 10 | 8+6
    assert project(serial, 100) == 3.0 + 10.0
    assert project(serial, 3, jobs=6) == 3.0 + 16.0              # 10+6 | 10+6 | 8+8
    text = report("s", [serial, Measured(2, 18.0, [10.0, 8.0, 6.0], 0)], 100, 6)
    assert "| 2 | 18.0 | 1.50 | 24.0 | 17.0 |" in text
    assert "| 100 | 13.0 | 3.9 |" in text                        # 6 jobs: 51 s on one worker
