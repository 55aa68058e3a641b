"""Hydra overrides that shrink a real pipeline run to seconds, and helpers the end-to-end tests share."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMALL_BATCHES = [
    "train_env_manager.group_size=4",
    "actor_train.training_args.per_device_train_batch_size=16",
    "actor_train.training_args.gradient_accumulation_steps=2",
]
"""Groups of 4 episodes, optimiser steps of 32 rows."""

SMALL_FROZEN_LAKE = [
    *SMALL_BATCHES,
    "train_env_manager.num_env_groups=2",
    "val_env_manager.num_env_groups=8",
    "custom_envs.FrozenLake.max_actions_per_traj=4",
    "print_baselines=false",
]
"""The default FrozenLake config at 2 groups of 4 per step, 8 validation maps, 4 turns per episode."""

TWO_GROUPS_ONE_WORKER = [
    "train_env_manager.num_env_groups=2",
    "train_env_manager.group_size=4",
    "train_env_manager.max_env_num_per_worker=8",
    "val_env_manager.num_env_groups=8",
    "val_env_manager.max_env_num_per_worker=8",
    "actor_train.training_args.per_device_train_batch_size=16",
]
"""2 groups of 4 episodes per step on one env worker, 8 validation episodes on another, micro-batches of 16 rows."""

FEW_WORKERS = ["train_env_manager.max_env_num_per_worker=4", "val_env_manager.max_env_num_per_worker=8"]
"""Two training env workers and one validation worker for SMALL_FROZEN_LAKE."""


def steps(n: int) -> list[str]:
    """Train n steps, validating and saving a checkpoint at step n."""
    return [f"max_steps={n}", f"save_steps={n}", f"eval_steps={n}"]


def record_policy_server(monkeypatch: Any, events: list[str]) -> None:
    """Append "generate" to `events` at each `PolicyServer.generate_many` call and "weights" at each weight bucket
    it receives or confirms (a test of the step's order records its other phases beside these)."""
    from roll_pipeline.runtime.policy_server import PolicyServer

    generate_many, confirm = PolicyServer.generate_many, PolicyServer.confirm_weights
    receive = PolicyServer.receive_weight_bucket

    async def recorded_generate_many(self: Any, payload: Any) -> Any:
        events.append("generate")
        return await generate_many(self, payload)

    async def recorded_receive(self: Any, bucket: Any) -> Any:
        events.append("weights")
        return await receive(self, bucket)

    async def recorded_confirm(self: Any, version: Any, fingerprint: Any) -> Any:
        events.append("weights")
        return await confirm(self, version, fingerprint)

    monkeypatch.setattr(PolicyServer, "generate_many", recorded_generate_many)
    monkeypatch.setattr(PolicyServer, "receive_weight_bucket", recorded_receive)
    monkeypatch.setattr(PolicyServer, "confirm_weights", recorded_confirm)


def imported_roots(source: str) -> set[str]:
    """The top-level names of the modules that Python `source` imports by absolute name (`a` for `import a.b`
    and `from a.b import c`), imports inside functions included."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def run_to_end(config: Any) -> Any:
    """Run the pipeline of a composed `config` to its end in this process, closed whatever happens; its
    `RunSummary`."""
    from roll_pipeline import AgenticPipeline

    pipeline = AgenticPipeline(config, progress=False)
    try:
        return pipeline.run()
    finally:
        pipeline.close()


def run_two_steps_in_process(tmp_path: Any) -> Any:
    """The tiny model's run of 2 steps in this process (small FrozenLake, few workers, synchronous rollout), run
    and closed; the pipeline is returned for its run folder and workers."""
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.config.compose import compose

    overrides = [*steps(2), *SMALL_FROZEN_LAKE, *FEW_WORKERS, "cluster.backend=local"]
    cfg = compose(None, None, [*overrides, "async_generation_ratio=0", f"output_dir={tmp_path}"])
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        pipeline.run()
    finally:
        pipeline.close()
    return pipeline


def compact(events: list[str]) -> list[str]:
    """`events` with each run of one kind as one."""
    return [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]


def replaced(overrides: list[str], *extra: str) -> list[str]:
    """`overrides` then `extra`, an entry of `extra` taking the place of the entry of `overrides` with its key
    (Hydra refuses a key given twice)."""
    keys = {e.split("=", 1)[0] for e in extra}
    return [*(o for o in overrides if o.split("=", 1)[0] not in keys), *extra]


EXACT = [
    "train_env_manager.num_env_groups=4",  # 3 of the 4 groups play each step: the round-robin cursor moves
    "train_env_manager.group_size=2",
    "train_env_manager.max_env_num_per_worker=8",
    "rollout_batch_size=6",
    "val_env_manager.num_env_groups=2",
    "custom_envs.FrozenLake.max_actions_per_traj=4",
    "actor_train.training_args.per_device_train_batch_size=8",
    "actor_train.training_args.gradient_accumulation_steps=2",
    "actor_train.training_args.learning_rate=1e-3",
    "actor_infer.infer_batch_size=1",
    "cluster.backend=local",
    "async_generation_ratio=0",
    "eval_steps=3",
    "track_with=[]",
    "print_baselines=false",
]
"""The exact mode of docs/checkpoints.md (synchronous rollout, no redundant env slots, infer_batch_size=1) on one
train rank in this machine's processes (`cluster.backend=local`), validating at step 3."""

EXACT_TWO_RANKS_UNDER_RAY = replaced(
    EXACT,
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.world_size=2",  # two ranks: each gets half of every 8-row mini-batch
    "cluster.backend=ray",
    "eval_steps=2",
    "save_steps=2",
    "max_steps=4",
)
"""EXACT with 2 data-parallel train ranks under Ray: 4 steps, checkpoints and validations at steps 2 and 4."""


@dataclass(frozen=True)
class ResumedRuns:
    """The uninterrupted run of EXACT_TWO_RANKS_UNDER_RAY and a run resumed from its step-2 checkpoint."""

    ranks: int
    """The actor's train ranks."""
    whole: Any
    """The uninterrupted run's `RunSummary`."""
    resumed: Any
    """The resumed run's `RunSummary`."""
    whole_dir: Path
    """The uninterrupted run's folder (metrics.jsonl)."""
    resumed_dir: Path
    """The resumed run's folder."""
    resume_point: Path
    """The uninterrupted run's step-2 checkpoint, where the resumed run started."""


def resume_under_ray(out: Path) -> ResumedRuns:
    """Run EXACT_TWO_RANKS_UNDER_RAY to its end, then again from its step-2 checkpoint (on the running Ray
    instance): one pair of runs that the resume tests of one rank's and two ranks' state both read. Resumed
    from the run's own checkpoint, not from a killed run: a killed driver would strand its Ray actors in the
    shared test instance (test_exact_resume.py kills `roll train` without Ray)."""
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.config.compose import compose

    def run(exp: str, *extra: str) -> tuple[int, Any]:
        cfg = compose(
            None, None, [*EXACT_TWO_RANKS_UNDER_RAY, f"output_dir={out}", f"exp_name={exp}", *extra]
        )
        pipeline = AgenticPipeline(cfg, progress=False)
        try:
            return pipeline.parts.actor_train.size, pipeline.run()
        finally:
            pipeline.close()

    ranks, whole = run("whole")
    resume_point = out / "whole" / "checkpoints" / "checkpoint-2"
    _, resumed = run("resumed", f"resume_from_checkpoint={resume_point}")
    return ResumedRuns(ranks, whole, resumed, out / "whole", out / "resumed", resume_point)
