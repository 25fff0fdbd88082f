"""Benchmarks of designs built from Beehive's tiles: the UDP echo benchmark behind
``apiary bench DESIGN`` (:mod:`~beehive.bench.echo`), and the ``apiary bench`` command
(:mod:`~beehive.bench.cli`), which also runs the NoC router benchmark of :mod:`apiary.bench`."""
