"""End to end: `roll sweep` over two seeds of the real pipeline (tiny model, in-process backend, 2 steps),
then the same command again, which reuses both runs instead of training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from small_runs import FEW_WORKERS, SMALL_FROZEN_LAKE, steps

SMALL = [*steps(2), *SMALL_FROZEN_LAKE, *FEW_WORKERS, "cluster.backend=local", "track_with=[stdout]"]


@pytest.mark.slow
def test_two_seeds_sweep_then_resume_without_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_dir = tmp_path / "sweep"
    argv = ["sweep", "--seeds", "1,2", "--out", str(sweep_dir), "--no-progress"]
    argv += [*SMALL, f"output_dir={tmp_path}", "exp_name=sw"]
    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    runs = [tmp_path / "sw_seed1", tmp_path / "sw_seed2"]
    for seed, run in zip((1, 2), runs, strict=True):
        config = json.loads((run / "config.json").read_text())
        assert (config["seed"], config["exp_name"]) == (seed, run.name)
        assert (run / "checkpoints" / "checkpoint-2").is_dir()
        assert "[step 2/2]" in (run / "train.log").read_text()  # the run's own console lines
        assert f"[sweep] seed {seed} done" in first
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert [(r["seed"], r["status"], r["last_step"], r["exit_code"]) for r in data["runs"]] == [
        (1, "done", 2, 0),
        (2, "done", 2, 0),
    ]
    for run in data["runs"]:
        assert [point[0] for point in run["curve"]] == [0, 2]  # step-0 validation and the final one
        assert 0.0 <= run["final_success"] <= 1.0 and run["wall_minutes"] > 0
    assert (sweep_dir / "sweep.md").read_text().startswith("| seed |")
    assert (sweep_dir / "sweep.png").read_bytes()[:4] == b"\x89PNG"

    mtimes = [(run / "metrics.jsonl").stat().st_mtime_ns for run in runs]
    assert cli.main(argv) == 0
    second = capsys.readouterr().out
    assert "[sweep] seed 1: reusing" in second and "[sweep] seed 2: reusing" in second
    assert "training in" not in second and "resuming" not in second  # no seed started
    assert [(run / "metrics.jsonl").stat().st_mtime_ns for run in runs] == mtimes
    assert [r["status"] for r in json.loads((sweep_dir / "sweep.json").read_text())["runs"]] == [
        "reused",
        "reused",
    ]
