"""Benchmarks for proxy-component; run `bench/bench_component.py` (see bench/README.md)."""
