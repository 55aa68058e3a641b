"""Spawning a run's workers: which roles get one, on which devices, with how many threads and ranks, asking Ray
for which CPUs. `RoleSpawner` plans once per run (`plan_placement`, `plan_cpus`) and builds each role's worker
or data-parallel ranks from that plan; the pipeline decides what each worker is given."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_strategies.deepspeed_config import zero_stage

from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.cluster import Cluster, ClusterError
from roll_pipeline.runtime.placement import CpuPlan, plan_cpus, plan_placement, strategy_kwargs
from roll_pipeline.runtime.ranks import RankGroup

__all__ = ["RoleSpawner", "SpawnSettings", "cpu_threads"]


@dataclass(frozen=True)
class SpawnSettings:
    """What spawning reads of a run's config (`trainer.settings.spawn_settings`)."""

    roles: dict[str, WorkerConfig]  # every worker role by section name (the critic only when one is used)
    names: list[
        str
    ]  # the roles with a worker of their own (an exact KL's reference lives in the train worker)
    backend: str  # cluster.backend
    thread_share: float  # of the cores a CPU role without num_threads takes (0.5 under asynchronous rollout)
    env_workers: int  # env workers of the train and val rollouts (each asks Ray for a little CPU)


def cpu_threads(configured: int | None, device: str, share: float = 1.0) -> int | None:
    """Threads of a role: as configured, else `share` of the cores on the CPU (a Ray actor would get 1)."""
    if configured is not None or device != "cpu":
        return configured
    return max(1, round((os.cpu_count() or 1) * share))


class RoleSpawner:
    """Builds the workers of a run's roles on `cluster`, each loading `model_path`."""

    def __init__(self, spawn: SpawnSettings, cluster: Cluster, model_path: Path) -> None:
        self.cluster, self.model_path, self.thread_share = cluster, model_path, spawn.thread_share
        self.roles, self.names = spawn.roles, spawn.names
        self.placements = plan_placement(self.roles, spawn.backend)
        self.cpus = self._plan_cpus(self.names, spawn.env_workers)

    def threads(self, role: WorkerConfig, device: str, ranks: int = 1) -> int | None:
        """A role's torch threads: its share of the cores (a role's ranks split it)."""
        return cpu_threads(role.num_threads, device, self.thread_share / ranks)

    def _plan_cpus(self, names: Sequence[str], env_workers: int) -> CpuPlan:
        """The Ray CPU request of each worker (`plan_cpus`); requests a local Ray instance cannot hold stop the
        run here, with the fix (an existing cluster may grow or free CPUs: a warning)."""
        placements = self.placements
        threads = {n: self.threads(self.roles[n], placements[n].device, placements[n].ranks) for n in names}
        capacity = self.cluster.cpu_capacity()
        plan = plan_cpus({n: self.roles[n] for n in names}, placements, threads, env_workers, capacity)
        if plan.problem and capacity is not None and not capacity.can_grow:
            raise ClusterError(plan.problem)
        if plan.problem:
            from tqdm.auto import tqdm

            tqdm.write(f"[roll] WARNING: {plan.problem}")
        return plan

    def spawn(self, cls: type, name: str, **kwargs: Any) -> Any:
        """A worker of `cls` on the role's devices, loading the run's model with the role's backend, dtype and
        threads, asking Ray for the CPUs of the plan."""
        role, placement = self.roles[name], self.placements[name]
        return self.cluster.spawn(
            cls,
            str(self.model_path),
            name=name,
            num_cpus=self.cpus.roles[name],
            num_gpus=placement.num_gpus,
            device=placement.device,
            dtype=role.model_args.dtype,
            num_threads=self.threads(role, placement.device),
            **strategy_kwargs(role),
            **kwargs,
        )

    def spawn_ranks(self, cls: type, name: str, **kwargs: Any) -> RankGroup:
        """A trained role's workers: `spawn`'s one worker, or its data-parallel ranks (`plan_placement`), each
        on its device with its share of the role's threads, meeting in one group (`Cluster.spawn_ranks`)."""
        role, placement = self.roles[name], self.placements[name]
        strategy = strategy_kwargs(role)
        # ZeRO-3 partitions the weights: exporting them is a collective every rank joins (2 is DeepSpeed's default)
        gathers = (
            strategy["strategy_name"] == "deepspeed_train" and zero_stage(strategy["strategy_config"]) == 3
        )
        if placement.ranks == 1:
            return RankGroup(self.cluster, [self.spawn(cls, name, **kwargs)])
        ranks = self.cluster.spawn_ranks(
            cls,
            str(self.model_path),
            name=name,
            rank_kwargs=[{"device": placement.device_of(r)} for r in range(placement.ranks)],
            num_cpus=self.cpus.roles[name],
            num_gpus=placement.num_gpus,
            dtype=role.model_args.dtype,
            num_threads=self.threads(role, placement.device, placement.ranks),
            **strategy,
            **kwargs,
        )
        return RankGroup(self.cluster, ranks, gathers_weights=gathers)
