"""Benchmarks and evaluation harnesses (not shipped with the package)."""
