"""The rollout phase's setup: env workers on the cluster, the layout, sampling, and the scheduler.

Training and validation each get their own scheduler and env workers, so validation episodes (greedy,
fixed seeds, never replayed) can never mix with training groups. What the setup reads of a run's config is
its `RolloutSettings` (`assembly.settings.rollout_settings`) and the env manager's config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from roll_algos import starpo_group_filter
from roll_rollout import (
    EnvCallLimits,
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    PolicyClient,
    RolloutScheduler,
    SamplingSettings,
    SchedulerSettings,
    WorkerLink,
    envs_per_worker,
)

from roll_pipeline.config.envs import CustomEnvConfig, EnvManagerConfig
from roll_pipeline.config.roles import GeneratingArgs
from roll_pipeline.runtime.cluster import Cluster
from roll_pipeline.runtime.placement import ENV_WORKER_CPUS


@dataclass(frozen=True)
class RolloutSettings:
    """What the rollout setup reads of a run's config (besides each env manager's own config)."""

    envs: Mapping[
        str, CustomEnvConfig
    ]  # the env tags: env type and config, turn and token limits, instruction
    generating: GeneratingArgs  # the inference role's sampling: max_new_tokens, temperature schedule, top_p/k
    sequence_length: int  # max tokens of a prompt plus its response
    async_generation_ratio: int  # training: how many policy versions generation may run ahead (0: in step)
    batch_timeout_s: float  # a batch not delivered within this time stops the run
    filter_ratio: float  # training: StarPO-S keeps this fraction of the groups (1: no filter)


def layout_of(manager: EnvManagerConfig) -> EnvLayout:
    """The scheduler layout of an env manager config."""
    assert manager.num_groups_partition is not None
    num_envs = manager.num_env_groups * (manager.group_size + manager.group_size_redundancy)
    return EnvLayout(
        manager.num_env_groups,
        manager.group_size,
        tuple(manager.tags),
        tuple(manager.num_groups_partition),
        envs_per_worker(num_envs, manager.max_env_num_per_worker),
        manager.group_size_redundancy,
    )


def sampling_of(
    settings: RolloutSettings, tags: Sequence[str], greedy: bool, step: int = 0, demonstrate: bool = False
) -> dict[str, SamplingSettings]:
    """Per-tag sampling at training step `step` (as the metrics number it): the env's token budget per turn, the role's sampling
    (its temperature_schedule for training, greedy for validation); `demonstrate`: the envs answer instead."""
    gen = settings.generating
    return {
        tag: SamplingSettings(
            max_new_tokens=min(settings.envs[tag].max_tokens_per_step, gen.max_new_tokens),
            temperature=1.0 if greedy else gen.temperature_at(step),
            top_p=gen.top_p,
            top_k=gen.top_k,
            greedy=greedy,
            demonstrate=demonstrate,
        )
        for tag in tags
    }


def slots_of(settings: RolloutSettings, layout: EnvLayout, worker: int) -> list[EnvSlotSpec]:
    """The env slots hosted by `worker`."""
    slots = []
    for env_id in layout.env_ids_of_worker(worker):
        tag = layout.tag_of_group(layout.group_of_env(env_id))
        env = settings.envs[tag]
        slots.append(
            EnvSlotSpec(
                env_id,
                tag,
                env.env_type,
                dict(env.env_config),
                env.max_actions_per_traj,
                env.max_history_turns,
                settings.sequence_length,
                env.env_instruction,
                env.response_prefix,
                dict(env.fixed_players),
            )
        )
    return slots


def std_filter(scores: Sequence[Sequence[float]], keep: int) -> list[int]:
    """StarPO-S through roll_algos: the `keep` groups of largest score std."""
    flat = torch.tensor([s for group in scores for s in group], dtype=torch.float64)
    group_ids = torch.tensor([g for g, group in enumerate(scores) for _ in group])
    kept = starpo_group_filter(flat, group_ids, keep_fraction=keep / len(scores))
    return sorted({int(g) for g in group_ids[kept].tolist()})


def build_scheduler(
    settings: RolloutSettings,
    manager: EnvManagerConfig,
    cluster: Cluster,
    tokenizer: Any,
    policy: PolicyClient,
    *,
    validation: bool,
    seed: int,
    name: str,
    demonstration: bool = False,
) -> RolloutScheduler:
    """A scheduler whose env workers are spawned on `cluster` (and respawned if they die); `demonstration`: one
    whose episodes the envs answer (`demonstration_steps`), synchronous (nothing played ahead can leak into
    the RL steps) and unfiltered (every demonstrated group scores alike)."""
    layout = layout_of(manager)
    limits = EnvCallLimits(
        manager.max_env_step_concurrent,
        manager.env_step_timeout_s,
        manager.max_hung_env_calls,
        backup_after_s=manager.env_step_backup_after_s,
    )

    def spawn(worker: int) -> WorkerLink:
        handle = cluster.spawn(
            EnvWorker,
            slots_of(settings, layout, worker),
            tokenizer,
            policy,
            limits=limits,
            name=f"{name}_env_{worker}",
            num_cpus=ENV_WORKER_CPUS,
        )
        return WorkerLink(
            submit=cluster.remote_method(handle, "submit"),
            cancel=cluster.remote_method(handle, "cancel"),
            poll=cluster.remote_method(handle, "poll"),
            kill=lambda: cluster.kill(handle),
        )

    group_filter = None
    if (
        validation
    ):  # never replayed: a failed episode fails its seed, and no failure stops validation; nothing
        # trains on it, so a backup races its original (roll_rollout.scheduling.backups)
        scheduling = SchedulerSettings(
            max_failures_per_group=0,
            batch_timeout_s=settings.batch_timeout_s,
            max_consecutive_given_up=1 << 62,
            race_backups=True,
        )
    else:  # a demonstration is synchronous and unfiltered
        rl = not demonstration
        scheduling = SchedulerSettings(
            async_generation_ratio=settings.async_generation_ratio if rl else 0,
            max_failures_per_group=manager.max_failures_per_group,
            batch_timeout_s=settings.batch_timeout_s,
            filter_keep_fraction=settings.filter_ratio if rl else 1.0,
            keyed_sampling=True,  # the pipeline's policy servers sample each turn by its key
        )
        group_filter = std_filter if rl and settings.filter_ratio < 1 else None
    sampling = sampling_of(settings, manager.tags, greedy=validation, demonstrate=demonstration)
    return RolloutScheduler(
        layout, spawn, sampling, seed=seed, settings=scheduling, group_filter=group_filter
    )
