"""Benchmarks: scripts anyone can run; each prints a table. Figures go to bench/RESULTS.md."""
