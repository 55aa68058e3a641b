"""Spawning a run's workers from their plans: `RolePlan` is everything one role's workers need (devices, ranks,
CPUs, threads, backend, optimizer), decided once per run by `runtime.placement.plan_roles`;
`RoleSpawner` builds each role's worker or data-parallel ranks from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_strategies.train.deepspeed_config import zero_stage

from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.cluster import Cluster
from roll_pipeline.runtime.gpu_pool import GpuSlots
from roll_pipeline.runtime.ranks import RankGroup

__all__ = ["RolePlan", "RoleSpawner", "SpawnSettings"]


@dataclass(frozen=True)
class SpawnSettings:
    """What spawning reads of a run's config (`assembly.settings.spawn_settings`)."""

    roles: dict[str, WorkerConfig]  # every worker role by section name (the critic only when one is used)
    names: list[
        str
    ]  # the roles with a worker of their own (an exact KL's reference lives in the train worker)
    backend: str  # cluster.backend
    thread_share: float  # of the cores a CPU role without num_threads takes (0.5 under asynchronous rollout)
    env_workers: int  # env workers of the train and val rollouts (each asks Ray for a little CPU)
    share_prefix: bool = False  # every role's strategy computes the tokens rows share from their start once
    reference_in_trainer: bool = False  # the train worker holds a frozen reference copy (an exact KL)


@dataclass(frozen=True)
class RolePlan:
    """Where and how one role's workers run: one plan per role, decided once per run."""

    device: str
    """torch device of the role's worker (of every rank unless `rank_devices` says otherwise)."""
    num_gpus: float
    """GPUs each of the role's Ray actors asks for (0 on the CPU and in-process)."""
    ranks: int
    """Data-parallel ranks: one worker each (1 for a role that does not train)."""
    rank_devices: tuple[str, ...]
    """Each rank's torch device, rank 0 first."""
    num_cpus: float
    """CPUs each of the role's Ray actors asks for."""
    num_threads: int | None
    """torch threads of each worker (None: torch's default)."""
    dtype: str
    """The model's dtype in the worker."""
    strategy: dict[str, Any]
    """`strategy_name` / `strategy_config` / `share_prefix` of the worker's constructor."""
    optimizer: Mapping[str, Any] = field(default_factory=dict)
    """The optimizer arguments of a trained role's strategy (empty for a role that does not train)."""
    gpus: GpuSlots | None = None
    """Under Ray, the role's GPUs in the run's GPU pool (rank r's: `gpus.gpus[r]`); None on the CPU, in-process."""

    @property
    def gathers_weights(self) -> bool:
        """Whether exporting the weights is a collective every rank joins (ZeRO-3 partitions them)."""
        return (
            self.strategy["strategy_name"] == "deepspeed_train"
            and zero_stage(self.strategy["strategy_config"]) == 3
        )


class RoleSpawner:
    """Builds the workers of a run's roles on `cluster` from their plans, each loading `model_path`."""

    def __init__(self, plans: Mapping[str, RolePlan], cluster: Cluster, model_path: Path) -> None:
        self.plans, self.cluster, self.model_path = plans, cluster, model_path

    def spawn(self, cls: type, name: str, **kwargs: Any) -> Any:
        """One worker of `cls` for role `name`, on its plan's device, loading the run's model with the plan's
        backend, dtype, threads and optimizer, asking Ray for the plan's CPUs and GPUs."""
        plan = self.plans[name]
        return self.cluster.spawn(
            cls, str(self.model_path), name=name, device=plan.device, **_plan_kwargs(plan), **kwargs
        )

    def spawn_ranks(self, cls: type, name: str, **kwargs: Any) -> RankGroup:
        """A trained role's workers: `spawn`'s one worker, or its data-parallel ranks, each on its device,
        meeting in one group (`Cluster.spawn_ranks`)."""
        plan = self.plans[name]
        if plan.ranks == 1:
            return RankGroup(self.cluster, [self.spawn(cls, name, **kwargs)])
        ranks = self.cluster.spawn_ranks(
            cls,
            str(self.model_path),
            name=name,
            rank_kwargs=[{"device": device} for device in plan.rank_devices],
            **_plan_kwargs(plan),
            **kwargs,
        )
        return RankGroup(self.cluster, ranks, gathers_weights=plan.gathers_weights)


def _plan_kwargs(plan: RolePlan) -> dict[str, Any]:
    """What a plan gives every worker of its role but the device: the CPUs and GPUs its Ray actors ask for
    (`gpus=` only in the GPU pool), and the constructor's dtype, threads, backend and optimizer."""
    pool = {"gpus": plan.gpus} if plan.gpus is not None else {}
    return {
        "num_cpus": plan.num_cpus,
        "num_gpus": plan.num_gpus,
        **pool,
        "dtype": plan.dtype,
        "num_threads": plan.num_threads,
        **plan.strategy,
        **plan.optimizer,
    }
