"""A real run with 2 data-parallel train ranks under Ray (gloo on the CPU, the builtin tiny model): 4 steps with
checkpoints, then a resume from the step-2 checkpoint that must reach the uninterrupted run's step-4 weights and
metrics (the exact mode of docs/checkpoints.md, as `test_exact_resume.py` checks for one rank without Ray). The
pair of runs is `resumed_under_ray` (tests/conftest.py), which `test_exact_resume.py` reads too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from roll_pipeline import AgenticPipeline, CheckpointManager, RunSummary
from roll_pipeline.config.compose import compose
from safetensors.torch import load_file
from small_runs import EXACT_TWO_RANKS_UNDER_RAY as EXACT
from small_runs import ResumedRuns

TIMED = ("time/", "weight_sync/seconds", "rollout/env_worker_threads_max", "memory/")


def _rows(run_dir: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        r["step"]: {k: v for k, v in r.items() if not k.startswith(TIMED) and not k.endswith("_per_s")}
        for r in rows
    }


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(str(CheckpointManager.model_dir(checkpoint) / "model.safetensors"))


@pytest.mark.ray
@pytest.mark.slow
def test_two_ranks_under_ray_train_save_and_resume_into_the_uninterrupted_run(resumed_under_ray: ResumedRuns):
    runs = resumed_under_ray
    assert runs.ranks == 2 and runs.whole.steps == 4
    assert CheckpointManager.load_state(runs.resume_point)["step"] == 2
    assert runs.resumed.steps == 4 and runs.resumed.last_checkpoint.name == "checkpoint-4"
    want, have = _rows(runs.whole_dir)[4], _rows(runs.resumed_dir)[4]
    assert have == want
    assert want["actor/micro_batches"] > 0 and want["train/nonfinite_steps"] == 0
    final, reference = _weights(runs.resumed.last_checkpoint), _weights(runs.whole.last_checkpoint)
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in reference)
    resume_point = _weights(runs.resume_point)
    assert not all(torch.equal(resume_point[k], reference[k]) for k in reference)  # steps 3 and 4 trained


@pytest.mark.slow
def test_in_process_the_ranks_of_the_actor_and_a_gae_critic_are_child_processes(tmp_path):
    """`cluster.backend=local` holds one process group per process: each rank runs in a child process."""
    local = [
        o for o in EXACT if not o.startswith(("cluster.backend", "max_steps", "save_steps", "eval_steps"))
    ]
    cfg = compose(
        None,
        None,
        [
            *local,
            "cluster.backend=local",
            "adv_estimator=gae",
            "critic.world_size=2",
            "max_steps=1",
            f"output_dir={tmp_path}",
            "exp_name=local",
        ],
    )
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        assert (
            pipeline.parts.actor_train.size == 2
            and pipeline.parts.critic is not None
            and pipeline.parts.critic.size == 2
        )
        summary = pipeline.run()
    finally:
        pipeline.close()
    assert summary.steps == 1 and summary.last_checkpoint is not None
    assert (summary.last_checkpoint / "critic" / "model.safetensors").is_file()
    row = _rows(tmp_path / "local")[1]
    assert row["critic/micro_batches"] > 0 and row["actor/micro_batches"] > 0
    assert row["train/nonfinite_steps"] == 0


@pytest.mark.deepspeed
@pytest.mark.slow
def test_zero3_ranks_in_process_sync_their_gathered_weights_and_resume_exactly(tmp_path):
    """2 ZeRO-3 ranks (each holding half of the weights) as child processes: every weight sync and checkpoint
    gathers across both; a resume from step 1 reaches the uninterrupted step-2 weights."""
    pytest.importorskip("deepspeed")
    fixed = ("cluster.backend", "max_steps", "save_steps", "eval_steps")
    zero3 = [
        *(o for o in EXACT if not o.startswith(fixed)),
        "cluster.backend=local",
        "kl_penalty=k3",
        "actor_train.strategy_args.strategy_name=deepspeed_train",
        "+actor_train.strategy_args.strategy_config={zero_optimization: {stage: 3}}",
        "max_steps=2",
        "save_steps=1",
        "eval_steps=2",
    ]

    def run(exp: str, *extra: str) -> RunSummary:
        cfg = compose(None, None, [*zero3, f"output_dir={tmp_path}", f"exp_name={exp}", *extra])
        pipeline = AgenticPipeline(cfg, progress=False)
        try:
            assert pipeline.parts.actor_train.size == 2 and pipeline.parts.actor_train.gathers_weights
            return pipeline.run()
        finally:
            pipeline.close()

    whole = run("whole")
    first = tmp_path / "whole" / "checkpoints" / "checkpoint-1"
    resumed = run("resumed", f"resume_from_checkpoint={first}")
    assert _rows(tmp_path / "resumed")[2] == _rows(tmp_path / "whole")[2]
    final, reference = _weights(resumed.last_checkpoint), _weights(whole.last_checkpoint)
    assert all(torch.equal(final[k], reference[k]) for k in reference)
    assert not all(torch.equal(_weights(first)[k], reference[k]) for k in reference)
    assert _rows(tmp_path / "whole")[2]["weight_sync/skipped"] == 0.0  # the gathered weights were sent
