"""Not collected by the suite (its name does not start with ``test_``): the test that
tests/sweep/test_sweep.py runs as a sweep's ``test`` job. It passes at width 64 only."""

import json
import os

from apiary.sweep.jobs import POINT_VARIABLE


def test_width_is_64():
    assert json.loads(os.environ[POINT_VARIABLE])["width"] == 64, "this point is not 64 bits wide"


def test_takes_its_time():
    import time
    time.sleep(30)
