"""Runs of runs: `sweep.py` (per-seed results, tables, reports), `sweep_plot.py` (the per-seed curves) and
`sweep_runner.py` (`roll sweep`)."""
