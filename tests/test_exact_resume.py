"""Exact resume, proved by a real kill.

A `roll train` process is killed with SIGKILL (no flag, no cooperation) and resumed with
`resume_from_checkpoint=auto`; the resumed run must log the same metrics and end with the same weights as
a run that was never interrupted: bitwise, on the CPU with `cluster.backend=local` in the exact mode of
docs/checkpoints.md (synchronous rollout, no redundant env slots, `actor_infer.infer_batch_size=1`).
A second process is killed while it writes a checkpoint: the previous checkpoint must still load.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from roll_pipeline import CheckpointManager
from roll_pipeline.config.compose import compose
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.state.checkpoint import MANIFEST_FILE, checkpoint_problem, checkpoint_step
from roll_pipeline.trainer.start_reference import REFERENCE_FILE
from safetensors.torch import load_file
from small_runs import EXACT, ResumedRuns, replaced, run_to_end

TIMED = ("time/", "weight_sync/seconds", "rollout/env_worker_threads_max", "memory/")
"""Metrics that measure time, thread scheduling or the processes' memory, not the run's result (and every
`*_per_s` rate)."""

HANG_GUARD_S = 900.0  # only against a hung child; no assertion on speed


def _overrides(out: Path, exp: str, *extra: str) -> list[str]:
    return replaced(EXACT, f"output_dir={out}", f"exp_name={exp}", *extra)


def _run_in_process(out: Path, exp: str, *extra: str):
    return run_to_end(compose(None, None, _overrides(out, exp, *extra)))


def _start_roll_train(out: Path, exp: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = out / f"{exp}.log"
    roll = Path(sys.executable).with_name("roll")
    cmd = [str(roll), "train", "--no-progress", *_overrides(out, exp, *extra)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def _roll_train(out: Path, exp: str, *extra: str) -> Path:
    """Run `roll train` to its end in a fresh process (no state of this test process can leak into the
    numbers); returns its newest checkpoint."""
    proc, log = _start_roll_train(out, exp, *extra)
    _wait_for(proc, log, "its end", lambda: proc.poll() is not None, exits=True)
    assert proc.returncode == 0, log.read_text()[-3000:]
    newest = CheckpointManager(out / exp / "checkpoints").latest()
    assert newest is not None
    return newest


def _wait_for(
    proc: subprocess.Popen[bytes], log: Path, what: str, done: Callable[[], bool], exits: bool = False
) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not done():
        if not exits and proc.poll() is not None:
            pytest.fail(f"roll train exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(
                f"roll train did not reach {what} in {HANG_GUARD_S:.0f} s:\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.02)


def _untimed(row: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in row.items() if not k.startswith(TIMED) and not k.endswith("_per_s")}


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(str(CheckpointManager.model_dir(checkpoint) / "model.safetensors"))


@pytest.mark.slow
def test_a_run_killed_after_step_3_resumes_into_the_uninterrupted_run_exactly(tmp_path):
    whole = _roll_train(tmp_path, "whole", "max_steps=6", "save_steps=3")
    assert whole.name == "checkpoint-6"

    proc, log = _start_roll_train(tmp_path, "killed", "max_steps=6", "save_steps=3")
    checkpoints = tmp_path / "killed" / "checkpoints"
    _wait_for(proc, log, "checkpoint-3", lambda: (checkpoints / "checkpoint-3" / MANIFEST_FILE).exists())
    os.kill(proc.pid, signal.SIGKILL)  # while it works on step 4 (checkpoint-3 appears whole, by rename)
    assert proc.wait() == -signal.SIGKILL
    assert not (checkpoints / "checkpoint-6").exists(), "the process finished before the kill"

    resumed = _roll_train(tmp_path, "killed", "max_steps=6", "save_steps=3", "resume_from_checkpoint=auto")
    assert resumed.name == "checkpoint-6"
    assert "resuming from" in log.read_text() and "checkpoint-3 (step 3)" in log.read_text()

    expected, got = read_metrics(tmp_path / "whole"), read_metrics(tmp_path / "killed")
    assert [r["step"] for r in got] == [0, 1, 2, 3, 4, 5, 6]  # rows a killed step 4 logged were dropped
    for want, have in zip(expected, got, strict=True):
        assert _untimed(have) == _untimed(want), f"step {want['step']} differs"
    final, reference = _weights(resumed), _weights(whole)
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in reference)


def test_each_checkpoint_is_written_after_its_steps_metrics_row(tmp_path, monkeypatch):
    """A resume from checkpoint N keeps the rows up to N: a row written after its checkpoint would be lost for
    good by a kill between the two."""
    rows_at_save: dict[int, list[int]] = {}
    save = CheckpointManager.save

    async def recording_save(self, step, state, save_models):
        rows_at_save[step] = [r["step"] for r in read_metrics(tmp_path / "run")]
        return await save(self, step, state, save_models)

    monkeypatch.setattr(CheckpointManager, "save", recording_save)
    _run_in_process(tmp_path, "run", "max_steps=2", "save_steps=1", "actor_infer.infer_batch_size=8")
    assert rows_at_save == {1: [0, 1], 2: [0, 1, 2]}


def _threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (SIGSTOP is delivered asynchronously)."""
    try:
        states = [
            (t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in Path(f"/proc/{pid}/task").iterdir()
        ]
    except (FileNotFoundError, ProcessLookupError):
        return True  # gone
    return all(state in "tTZX" for state in states)


def _kill_during_a_save(proc: subprocess.Popen[bytes], log: Path, checkpoints: Path) -> Path:
    """Freeze the process now and then; when it is frozen inside a save (a `.tmp` folder exists) after an
    earlier checkpoint completed, kill it there. Returns the `.tmp` folder it was writing."""
    deadline = time.monotonic() + HANG_GUARD_S
    while proc.poll() is None and time.monotonic() < deadline:
        os.kill(proc.pid, signal.SIGSTOP)
        while not _threads_stopped(proc.pid):
            time.sleep(0.0005)
        writing = [
            p for p in checkpoints.glob("checkpoint-*.tmp") if (checkpoint_step(p.with_suffix("")) or 0) >= 2
        ]
        if writing:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return writing[0]
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.003)
    proc.kill()
    pytest.fail(f"never caught roll train inside a checkpoint save:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_and_auto_resume_takes_it(tmp_path):
    proc, log = _start_roll_train(tmp_path, "run", "max_steps=12", "save_steps=1", "keep_last_n=2")
    checkpoints = tmp_path / "run" / "checkpoints"
    partial = _kill_during_a_save(proc, log, checkpoints)
    step = checkpoint_step(partial.with_suffix(""))
    assert step is not None and partial.is_dir()
    previous = checkpoints / f"checkpoint-{step - 1}"
    assert checkpoint_problem(previous) is None
    assert CheckpointManager(checkpoints).latest() == previous
    assert sorted(checkpoint_step(p) for p in checkpoints.glob("checkpoint-*") if p.suffix != ".tmp") == [
        s for s in (step - 2, step - 1) if s >= 1
    ]  # keep_last_n=2: only the two newest complete ones

    resumed = _run_in_process(
        tmp_path, "run", f"max_steps={step}", "save_steps=1", "keep_last_n=2", "resume_from_checkpoint=auto"
    )
    assert resumed.steps == step and resumed.val_history[0][0] == step - 1
    assert not partial.exists() and checkpoint_problem(checkpoints / f"checkpoint-{step}") is None
    steps = [r["step"] for r in read_metrics(tmp_path / "run")]
    assert steps == sorted(set(steps)) and steps[-1] == step


@pytest.mark.ray
@pytest.mark.slow
def test_under_ray_a_resumed_run_equals_the_uninterrupted_run(resumed_under_ray: ResumedRuns):
    """Ray actors (2 train ranks, the policy server, the env workers) resumed from step 2 of 4: the run shared
    with test_data_parallel_pipeline.py (`resumed_under_ray`), read here for each resumed step."""
    runs = resumed_under_ray
    assert runs.resumed.val_history[0][0] == 2
    want = {row["step"]: _untimed(row) for row in read_metrics(runs.whole_dir)}
    have = {row["step"]: _untimed(row) for row in read_metrics(runs.resumed_dir)}
    assert sorted(have) == [3, 4]
    for step, row in have.items():
        assert row == want[step], f"step {step} differs"
    final, reference = _weights(runs.resumed.last_checkpoint), _weights(runs.whole.last_checkpoint)
    assert all(torch.equal(final[k], reference[k]) for k in reference)


@pytest.mark.slow
def test_a_run_resumed_in_its_demonstration_steps_equals_the_uninterrupted_run(tmp_path):
    """A checkpoint inside `demonstration_steps` restores the demonstrations' own seed stream: the resumed
    run clones the same episodes and then samples the same RL step as the run never stopped."""
    demo = [
        "demonstration_steps=3",
        "custom_envs.FrozenLake.max_actions_per_traj=10",  # shortest paths on 4x4 maps run up to 9 moves
        "actor_train.training_args.lr_scheduler_type=constant",  # the first part stops at its max_steps
        "eval_steps=2",  # and validates there, as the whole run must too
    ]
    whole = _run_in_process(tmp_path, "whole", *demo, "max_steps=4", "save_steps=2")
    _run_in_process(tmp_path, "parts", *demo, "max_steps=2", "save_steps=2")
    resumed = _run_in_process(
        tmp_path, "parts", *demo, "max_steps=4", "save_steps=2", "resume_from_checkpoint=auto"
    )
    rows = read_metrics(tmp_path / "parts")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r.get("train/demonstration_step") for r in rows[1:]] == [1.0, 1.0, 1.0, 0.0]
    for want, have in zip(read_metrics(tmp_path / "whole"), rows, strict=True):
        assert _untimed(have) == _untimed(want), f"step {want['step']} differs"
    final, reference = _weights(resumed.last_checkpoint), _weights(whole.last_checkpoint)
    assert all(torch.equal(final[k], reference[k]) for k in reference)


@pytest.mark.slow
def test_a_reference_at_the_rl_start_resumes_from_before_and_after_it_into_the_uninterrupted_run(tmp_path):
    """kl_reference: rl_start, cloning at step 1: a checkpoint from before the first RL step (checkpoint-1) takes
    the reference at step 2 after the resume; one after it (checkpoint-2) keeps the reference's weights, the
    actor's of checkpoint-1, and the resumed run measures its KL against them as the run never stopped."""
    run = [
        "demonstration_steps=1",
        "kl_reference=rl_start",
        "kl_penalty=full_forward",
        "custom_envs.FrozenLake.max_actions_per_traj=10",  # shortest paths on 4x4 maps run up to 9 moves
        "actor_train.training_args.lr_scheduler_type=constant",  # the parts stop at their own max_steps
        "actor_train.training_args.warmup_steps=0",
        "eval_steps=1",  # each part validates at its end, so the whole run validates there too
        "validate_at_start=false",
        "save_steps=1",
    ]
    whole = _run_in_process(tmp_path, "whole", *run, "max_steps=3")
    for max_steps in (1, 2, 3):
        resume = ["resume_from_checkpoint=auto"] if max_steps > 1 else []
        parts = _run_in_process(tmp_path, "parts", *run, f"max_steps={max_steps}", *resume)
    checkpoints = tmp_path / "parts" / "checkpoints"
    assert not (checkpoints / "checkpoint-1" / REFERENCE_FILE).exists()  # cloning only: nothing taken yet
    reference = load_file(str(checkpoints / "checkpoint-2" / REFERENCE_FILE))
    clone = _weights(checkpoints / "checkpoint-1")  # the actor as the first RL step started
    assert reference.keys() == clone.keys() and all(torch.equal(reference[k], clone[k]) for k in clone)
    rows = read_metrics(tmp_path / "parts")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[1]["critic/kl"] == 0.0 and rows[2]["critic/kl"] > 0.0  # the policy is its reference at step 2
    for want, have in zip(read_metrics(tmp_path / "whole"), rows, strict=True):
        assert _untimed(have) == _untimed(want), f"step {want['step']} differs"
    final, uninterrupted = _weights(parts.last_checkpoint), _weights(whole.last_checkpoint)
    assert all(torch.equal(final[k], uninterrupted[k]) for k in uninterrupted)
