"""Runs of runs: `sweep.py` (per-seed results, tables, reports) and `sweep_runner.py` (`roll sweep`)."""
