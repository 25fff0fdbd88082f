"""The harness: what drives whole designs for measurements, above ``apiary`` and ``beehive``.

:mod:`harness.bench` holds the UDP and TCP echo benchmarks and every benchmark by name
(``runner.py``) with the ``apiary bench`` command (``cli.py``); :mod:`harness.vr_bench` the
Viewstamped Replication witness benchmark; :mod:`harness.sweep` sweeps on Dask and the
``apiary sweep`` command. Neither ``apiary`` nor ``beehive`` imports anything from here (see
docs/architecture.md)."""
