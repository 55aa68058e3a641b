"""Hydra overrides that shrink a real pipeline run to seconds, shared by the end-to-end tests."""

from __future__ import annotations

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
