"""Benchmarks: each prints its figures; with `--record PATH` it writes them with their
provenance (benchmarks/record.py), from which docs/performance.md is rendered."""
