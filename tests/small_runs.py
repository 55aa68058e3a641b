"""Hydra overrides that shrink a real pipeline run to seconds, shared by the end-to-end tests."""

from __future__ import annotations

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
