"""Not collected by the suite (its name does not start with ``test_``): the test that
tests/sweep/test_sweep.py runs as a sweep's ``test`` job. It passes at width 64 only."""

import json
import os

from harness.sweep.jobs import POINT_VARIABLE


def test_width_is_64():
    assert json.loads(os.environ[POINT_VARIABLE])["width"] == 64, "this point is not 64 bits wide"


def test_takes_its_time():
    import time
    time.sleep(30)


def test_kills_its_worker_the_first_time():
    """Kills the Dask worker that runs it (this test's parent process) unless the file
    ``$SWEEP_CHECK_MARKER`` exists, which it creates first: a worker lost once."""
    import signal
    marker = os.environ["SWEEP_CHECK_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
        import time
        time.sleep(5)
        raise AssertionError("the worker survived")         # (no one is left to hear it)
