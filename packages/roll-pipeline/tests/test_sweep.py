"""`roll sweep`'s table, clock and plot from synthetic run folders; its runner with stand-in processes."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.experiments.sweep import (
    STATUS_FILE,
    CurvePoint,
    current_timeline,
    first_crossing,
    format_table,
    read_seed,
    report_run_dirs,
    summary_rows,
    validation_curve,
)
from roll_pipeline.experiments.sweep_runner import (
    SeedJob,
    SweepError,
    config_differences,
    hydra_quoted,
    parse_seeds,
    plan_seed,
    plan_sweep,
    run_jobs,
)
from roll_pipeline.state.checkpoint import write_manifest

TAGS = ("FrozenLake", "Sokoban")


def make_run(
    root: Path,
    seed: int,
    val: dict[int, float],
    *,
    max_steps: int,
    step_s: float = 6.0,
    val_s: float = 30.0,
    status: dict | None = None,
) -> Path:
    """A run folder as `roll train` leaves it: config.json, and a metrics.jsonl row per step (validation at
    the steps of `val`, step 0 being validation only)."""
    run = root / f"exp_seed{seed}"
    run.mkdir(parents=True)
    config = tiny_config(exp_name=run.name, seed=seed, max_steps=max_steps, output_dir=str(root))
    (run / "config.json").write_text(json.dumps(config.model_dump(mode="json")))
    rows = []
    for step in range(max(val) + 1):
        row: dict[str, float] = {"step": step}
        if step:
            row["time/step_total"] = step_s
        if step in val:
            row |= {"val/env/FrozenLake/success": val[step], "time/step_val": val_s}
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if status is not None:
        (run / STATUS_FILE).write_text(json.dumps(status))
    return run


def reference_crossing(
    durations: list[float], val: dict[int, float], level: float
) -> tuple[int, float] | None:
    """Slow and obvious: walk the steps, adding each step's duration and each validation's, until a
    validation reaches `level` (durations[s]: step s's training time then its validation time)."""
    elapsed = 0.0
    for step in range(len(durations)):
        elapsed += durations[step]
        if step in val and val[step] >= level:
            return step, elapsed / 60
    return None


@pytest.mark.parametrize("case", range(20))
def test_time_to_threshold_matches_a_step_by_step_reference(case):
    rng = random.Random(case)
    steps = rng.randint(1, 60)
    eval_every = rng.randint(1, 7)
    rows, durations, val = [], [], {}
    for step in range(steps + 1):
        row: dict[str, float] = {"step": step}
        spent = 0.0
        if step:
            row["time/step_total"] = rng.uniform(0.5, 20.0)
            spent += row["time/step_total"]
        if step % eval_every == 0 or step == steps:
            success = {tag: rng.random() for tag in TAGS}
            row |= {f"val/env/{tag}/success": v for tag, v in success.items()}
            row["time/step_val"] = rng.uniform(1.0, 9.0)
            spent += row["time/step_val"]
            val[step] = sum(success.values()) / len(TAGS)
        rows.append(row)
        durations.append(spent)
    curve, total = validation_curve(rows)
    assert [p.step for p in curve] == sorted(val)
    assert total == pytest.approx(sum(durations) / 60)
    for level in (0.3, 0.5, 0.8):
        hit, expected = first_crossing(curve, level), reference_crossing(durations, val, level)
        assert (hit.step, pytest.approx(hit.minutes)) == expected if hit else expected is None


def test_unlogged_steps_count_at_the_next_logged_steps_duration():
    rows = [{"step": 0, "time/step_val": 60.0, "val/env/A/success": 0.1}]
    rows += [{"step": 4, "time/step_total": 30.0, "time/step_val": 60.0, "val/env/A/success": 0.6}]
    curve, total = validation_curve(rows)  # logging_steps=4: steps 1-3 were not logged
    assert curve == [CurvePoint(0, 0.1, 1.0), CurvePoint(4, 0.6, 1.0 + 2.0 + 1.0)]
    assert total == 4.0


def test_a_resume_replaces_the_rows_logged_after_its_checkpoint():
    first = [{"step": s, "time/step_total": 60.0, "val/env/A/success": 0.1 * s} for s in range(6)]
    second = [{"step": s, "time/step_total": 120.0, "val/env/A/success": 0.9} for s in range(3, 5)]
    timeline = current_timeline([*first, *second])  # crashed after step 5, resumed from checkpoint-2
    assert [r["step"] for r in timeline] == [0, 1, 2, 3, 4]
    curve, total = validation_curve([*first, *second])
    assert [p.success for p in curve][-2:] == [0.9, 0.9]
    assert total == 1 + 1 + 2 + 2  # steps 1-2 of the first attempt, 3-4 of the second (minutes)


def test_statuses_of_finished_unfinished_failed_and_missing_runs(tmp_path):
    done = read_seed(make_run(tmp_path, 1, {0: 0.1, 10: 0.6, 20: 0.85}, max_steps=20))
    assert (done.status, done.seed, done.last_step) == ("done", 1, 20)
    assert (done.final.success, done.best.step) == (0.85, 20)
    assert (done.crossing(0.5).step, done.crossing(0.8).step) == (10, 20)
    assert done.crossing(0.5).minutes == pytest.approx((10 * 6 + 2 * 30) / 60)
    unfinished = read_seed(make_run(tmp_path, 2, {0: 0.1, 10: 0.3}, max_steps=20))
    assert unfinished.status == "unfinished" and "step 10/20" in format_table([unfinished])
    failing = {"seed": 3, "attempts": [{"exit_code": 1, "wall_time_s": 90.0, "error": "ValueError: boom"}]}
    failed = read_seed(make_run(tmp_path, 3, {0: 0.1}, max_steps=20, status=failing))
    assert (failed.status, failed.exit_code, failed.wall_minutes) == ("failed", 1, 1.5)
    assert "failed (exit 1): ValueError: boom" in format_table([failed])
    missing = read_seed(tmp_path / "exp_seed4", seed=4)
    assert (missing.status, missing.curve) == ("missing", [])


def test_the_summary_rows_give_mean_and_worst_case(tmp_path):
    fast = read_seed(make_run(tmp_path, 1, {0: 0.1, 10: 0.9, 20: 0.8}, max_steps=20))
    slow = read_seed(make_run(tmp_path, 2, {0: 0.1, 10: 0.4, 20: 0.6}, max_steps=20))
    missing = read_seed(tmp_path / "exp_seed3", seed=3)
    mean, worst = summary_rows([fast, slow, missing])  # over the seeds with a curve
    # 0.5 reached at step 10 (0.5 + 1 + 0.5 min: validation, 10 steps, validation) and step 20 (3.5 min)
    assert mean[:6] == ["mean", "", "0.700", "0.750", "15 (2/2)", f"{(2.0 + 3.5) / 2:.1f}"]
    assert worst[:8] == ["worst", "", "0.600", "0.600", "20", "3.5", "never", "never"]
    table = format_table([fast, slow, missing], markdown=True).splitlines()
    assert len(table) == 2 + 3 + 2 and table[1].startswith("|---|")


def test_report_writes_table_json_and_plot_of_existing_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_run(runs, 1, {0: 0.1, 10: 0.6, 20: 0.85}, max_steps=20)
    make_run(runs, 2, {0: 0.1, 10: 0.2}, max_steps=20, status={"attempts": [{"exit_code": -9}]})
    (runs / "exp_seed1.old-1").mkdir()  # an old run moved aside by --force: not part of the sweep
    (runs / "exp_seed1.old-1" / "config.json").write_text("{}")
    assert cli.main(["sweep", "--report", str(runs)]) == 1  # a failed seed
    out = capsys.readouterr().out
    assert "killed" not in out and "failed (exit -9)" in out and "seed(s) failed: [2]" in out
    sweep_dir = runs / "exp_sweep"
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert [r["seed"] for r in data["runs"]] == [1, 2]
    first = data["runs"][0]
    assert first["thresholds"]["0.8"] == {"step": 20, "minutes": pytest.approx((20 * 6 + 3 * 30) / 60)}
    assert first["curve"][0] == [0, 0.1, 0.5]
    assert (sweep_dir / "sweep.md").read_text().startswith("| seed |")
    assert (sweep_dir / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert report_run_dirs([sweep_dir]) == [runs / "exp_seed1", runs / "exp_seed2"]  # a sweep folder


def test_runs_of_one_seed_are_told_apart_by_their_folder(tmp_path):
    a = read_seed(make_run(tmp_path / "a", 1, {0: 0.1, 10: 0.5}, max_steps=10).rename(tmp_path / "ref_s1"))
    b = read_seed(make_run(tmp_path / "b", 1, {0: 0.1, 10: 0.7}, max_steps=10).rename(tmp_path / "t15_s1"))
    c = read_seed(make_run(tmp_path / "b", 2, {0: 0.1, 10: 0.7}, max_steps=10))
    firsts = [line.split()[0:2] for line in format_table([a, b, c]).splitlines()[1:4]]
    assert firsts == [["1", "(ref_s1)"], ["1", "(t15_s1)"], ["2", "10/10"]]


def test_report_of_a_folder_without_runs_says_what_to_pass(tmp_path, capsys):
    assert cli.main(["sweep", "--report", str(tmp_path)]) == 2
    assert "pass runs/<exp_name>_seed<k> folders" in capsys.readouterr().err


def test_seed_lists():
    assert parse_seeds("1,2,3") == parse_seeds("1-3") == [1, 2, 3]
    assert parse_seeds("5, 7-8") == [5, 7, 8]
    for bad in ("1,1", "a", ""):
        with pytest.raises(SweepError, match="--seeds"):
            parse_seeds(bad)


def seed_config(root: Path, seed: int, max_steps: int = 20) -> dict:
    return tiny_config(
        exp_name=f"exp_seed{seed}", seed=seed, max_steps=max_steps, output_dir=str(root)
    ).model_dump(mode="json")


def test_plans_reuse_a_finished_run_and_resume_an_unfinished_one(tmp_path):
    done = make_run(tmp_path, 1, {0: 0.1, 20: 0.9}, max_steps=20)
    assert plan_seed(1, done, seed_config(tmp_path, 1), ["train"], force=False).action == "reuse"
    longer = plan_seed(1, done, seed_config(tmp_path, 1, max_steps=40), ["train"], force=False)
    assert longer.action == "run" and longer.move_aside  # no checkpoint to continue from
    crashed = make_run(tmp_path, 2, {0: 0.1, 10: 0.3}, max_steps=20)
    checkpoint = crashed / "checkpoints" / "checkpoint-10"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "model" / "model.safetensors").write_bytes(b"weights")
    (checkpoint / "pipeline_state.json").write_text('{"step": 10}')
    write_manifest(checkpoint)
    job = plan_seed(2, crashed, seed_config(tmp_path, 2), ["train"], force=False)
    assert (job.action, job.checkpoint, job.move_aside) == ("resume", checkpoint, False)
    assert job.command == ("train", f"resume_from_checkpoint={checkpoint}")
    assert hydra_quoted("/a b/checkpoint-1") == "'/a b/checkpoint-1'"
    forced = plan_seed(1, done, seed_config(tmp_path, 1), ["train"], force=True)
    assert (forced.action, forced.move_aside) == ("run", True)
    assert done.exists()  # planning changes nothing on disk


def test_a_run_folder_of_another_config_is_refused_with_the_fix(tmp_path):
    run = make_run(tmp_path, 1, {0: 0.1, 20: 0.9}, max_steps=20)
    other = seed_config(tmp_path, 1)
    other["actor_train"]["training_args"]["learning_rate"] = 0.5
    assert config_differences(json.loads((run / "config.json").read_text()), other) == [
        "actor_train.training_args.learning_rate"
    ]
    with pytest.raises(SweepError, match=r"learning_rate\); pass --force"):
        plan_seed(1, run, other, ["train"], force=False)


def test_sweep_refuses_seed_overrides(tmp_path):
    config = tiny_config(output_dir=str(tmp_path))
    with pytest.raises(SweepError, match="roll sweep sets seed per seed"):
        plan_sweep(
            config, [1], config_path=None, config_name=None, overrides=["seed=3"], force=False, progress=False
        )


def test_failed_and_killed_processes_are_reported_and_the_others_finish(tmp_path, capsys):
    scripts = {
        1: "print('step 1'); print('all good')",
        2: "import sys; print('Traceback ...', file=sys.stderr); raise ValueError('bad value: fix it')",
        3: "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    }
    jobs = [
        SeedJob(seed, tmp_path / f"run{seed}", "run", (sys.executable, "-c", code))
        for seed, code in scripts.items()
    ]
    jobs.append(SeedJob(4, tmp_path / "run4", "reuse"))
    ended = []
    attempts = run_jobs(jobs, 2, lambda job: None, lambda job, attempt: ended.append(job.seed))
    assert sorted(ended) == [1, 2, 3] and set(attempts) == {1, 2, 3}
    assert (attempts[1].exit_code, attempts[1].error) == (0, None)
    assert (attempts[2].exit_code, attempts[2].error) == (1, "ValueError: bad value: fix it")
    assert attempts[3].exit_code == -9 and attempts[3].error == "killed by SIGKILL (out of memory?)"
    assert "all good" in (tmp_path / "run1" / "train.log").read_text()
    assert "all good" not in capsys.readouterr().out  # in parallel, output goes to the logs only
    status = json.loads((tmp_path / "run2" / STATUS_FILE).read_text())
    assert status["seed"] == 2 and status["attempts"][0]["exit_code"] == 1
    result = read_seed(tmp_path / "run2", seed=2)
    assert (result.status, result.error) == ("failed", "ValueError: bad value: fix it")
