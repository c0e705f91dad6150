"""Benchmarks (``make bench``): each ``bench_*.py`` module has ``main() -> dict``.

They measure docflow and its peers in the same process, print a table with ratios, and
write JSON to ``bench-results/<module>.json``. Never part of the default pytest run.
"""
