"""Benchmarks measured by the project's own code."""
