"""Benchmarks of designs built from Beehive's tiles: the UDP echo benchmark behind
``apiary bench DESIGN`` (:mod:`~harness.bench.echo`), and the ``apiary bench`` command
(:mod:`~harness.bench.cli`), which also runs the NoC router benchmark of :mod:`apiary.bench`."""

#: Largest UDP payload a benchmark request may have: a 1500-byte MTU less IPv4's 20 and UDP's
#: 8 bytes (here so that the command line checks it without importing the benchmarks).
MAX_PAYLOAD = 1472
