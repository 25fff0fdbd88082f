"""Shared by every test: the sweep result cache (which ``apiary bench`` also reads) is a fresh
folder per test session, so a test never reads a result another run stored, nor leaves one in
the user's cache."""

import os
import shutil
import tempfile


def pytest_configure(config):
    os.environ["APIARY_SWEEP_CACHE"] = tempfile.mkdtemp(prefix="apiary-test-sweep-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("APIARY_SWEEP_CACHE", ""), ignore_errors=True)
