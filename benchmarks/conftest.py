"""Benchmarks import their shared measurement modules (e.g. `rollout_bench`) from this folder."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
