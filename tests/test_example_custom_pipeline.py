"""The user script in examples/custom_pipeline runs: an env registered from Python, with its own reward
shaping, trained by the pipeline; the shaping reaches the rewards the run trains on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from small_runs import TWO_GROUPS_ONE_WORKER, steps

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "custom_pipeline" / "train_shaped_frozen_lake.py"
SMALL = [*steps(2), "print_baselines=false", *TWO_GROUPS_ONE_WORKER]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_custom_pipeline_example_trains_with_its_shaped_env(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, f"output_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "[example] validation success" in proc.stdout
    rows = [
        json.loads(x) for x in (tmp_path / "step_cost_frozen_lake" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # every episode pays at least one turn's cost: score <= success - 0.05
        assert r["critic/score/mean"] <= r["env/FrozenLake/success"] - 0.05 + 1e-9, r
