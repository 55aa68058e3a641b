"""Trackers: one compact console line per step (the full set with `verbose`), metrics.jsonl always,
W&B in offline mode (a resumed run folder continues the same W&B run)."""

from __future__ import annotations

import json

import pytest
from roll_pipeline.observe.tracking import WANDB_ID_FILE, Tracker

STEP = {
    "critic/score/mean": 0.25,
    "env/FrozenLake/success": 0.5,
    "env/Sokoban/success": 0.25,
    "actor/pg_loss": 0.01,
    "time/step_total": 2.0,
}


def test_console_shows_one_compact_line_per_step(tmp_path, capsys):
    tracker = Tracker(tmp_path, ["stdout"], {"max_steps": 10})
    tracker.log({"val/env/FrozenLake/success": 0.094}, 0)
    tracker.log(STEP, 1)
    tracker.log({**STEP, "val/env/FrozenLake/success": 0.5, "val/env/Sokoban/success": 0.25}, 2)
    tracker.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[step 0/10]  val 0.094"
    assert lines[1] == "[step 1/10]  reward 0.250  success 0.375  2.0s/step"  # no ETA before a second step
    assert lines[2].startswith("[step 2/10]  reward 0.250  success 0.375  val 0.375  2.0s/step  ETA ")
    assert "pg_loss" not in "\n".join(lines)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[1]["actor/pg_loss"] == 0.01


def test_verbose_prints_every_shown_metric(tmp_path, capsys):
    tracker = Tracker(tmp_path, ["stdout"], {"max_steps": 10}, verbose=True)
    tracker.log(STEP, 1)
    tracker.close()
    assert "actor/pg_loss=0.01" in capsys.readouterr().out


def test_wandb_offline_run_records_the_metrics_and_resumes(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    ids = []
    for step in (1, 2):
        tracker = Tracker(tmp_path, ["wandb"], {"max_steps": 2}, tracker_kwargs={"project": "roll-test"})
        tracker.log({"env/FrozenLake/success": 0.125 * step}, step)
        tracker.close()
        ids.append((tmp_path / WANDB_ID_FILE).read_text())
    assert ids[0] == ids[1]  # the second Tracker continued the same W&B run
    # one offline folder per start (two starts within a second share one)
    files = sorted((tmp_path / "wandb").glob(f"offline-run-*-{ids[0]}/run-{ids[0]}.wandb"))
    data = b"".join(f.read_bytes() for f in files)
    # wandb-core writes the records asynchronously; a loaded machine may leave a start's file at its header
    assert files and b"env/FrozenLake/success" in data and (b"0.125" in data or b"0.25" in data)


def test_wandb_missing_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match=r"roll-pipeline\[wandb\]"):
        Tracker(tmp_path, ["wandb"], {})


def test_a_resume_drops_what_a_killed_run_logged_after_the_checkpoint(tmp_path):
    rows = [json.dumps({"step": s, "x": float(s)}) + "\n" for s in range(6)]
    (tmp_path / "metrics.jsonl").write_text("".join(rows) + '{"step": 6, "x":')  # killed mid-line
    tracker = Tracker(tmp_path, [], {}, resume_step=3)
    tracker.log({"x": 4.0}, 4)
    tracker.close()
    kept = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kept == [0, 1, 2, 3, 4]
    dropped = (tmp_path / "metrics.dropped.jsonl").read_text().splitlines()
    assert dropped[:2] == [rows[4].strip(), rows[5].strip()] and dropped[2] == '{"step": 6, "x":'


def test_a_fresh_start_in_a_used_folder_sets_the_earlier_runs_rows_aside(tmp_path):
    earlier = "".join(json.dumps({"step": s, "x": 9.0}) + "\n" for s in range(3))
    (tmp_path / "metrics.jsonl").write_text(earlier)  # a run killed before its first checkpoint
    tracker = Tracker(tmp_path, [], {})
    tracker.log({"x": 1.0}, 1)
    tracker.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "x": 1.0}]
    assert (tmp_path / "metrics.dropped.jsonl").read_text() == earlier


def test_the_checkpointed_wandb_run_id_is_continued_in_another_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "a").mkdir()
    first = Tracker(tmp_path / "a", ["wandb"], {}, tracker_kwargs={"project": "roll-test"})
    ids = first.run_ids()
    first.close()
    assert ids == {"wandb_run_id": (tmp_path / "a" / WANDB_ID_FILE).read_text()}
    (tmp_path / "b").mkdir()
    second = Tracker(tmp_path / "b", ["wandb"], {}, wandb_run_id=ids["wandb_run_id"])
    assert second.run_ids() == ids
    second.close()
    assert (tmp_path / "b" / WANDB_ID_FILE).read_text() == ids["wandb_run_id"]
    assert Tracker(tmp_path / "b", [], {}).run_ids() == ids  # also without wandb in track_with


def test_a_non_finite_metric_is_logged_as_it_is(tmp_path):
    """NaN and inf reach metrics.jsonl and TensorBoard unchanged: a diverging run shows where it diverged."""
    import math

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(tmp_path, ["tensorboard"], {"max_steps": 2})
    tracker.log({"actor/pg_loss": 0.5, "actor/grad_norm": 1.0}, 1)
    tracker.log({"actor/pg_loss": float("nan"), "actor/grad_norm": float("inf")}, 2)
    tracker.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert math.isnan(rows[1]["actor/pg_loss"]) and rows[1]["actor/grad_norm"] == math.inf
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("actor/grad_norm")] == [1.0, math.inf]
    assert math.isnan(events.Scalars("actor/pg_loss")[1].value)
