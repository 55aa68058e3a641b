"""Planning the roles, in one place: which backend, devices, CPUs and threads each role gets, from the
roles' `strategy_args`, `device_mapping`, `num_gpus_per_worker`, `num_threads` and `model_args.gguf_file` and
what the cluster offers (the config-time check of each role's strategy is `roll_pipeline.config.strategies`).

- `strategy_kwargs(role, share_prefix)`: `strategy_name` / `strategy_config` / `share_prefix` for the role
  worker's constructor;
- `plan_placement(roles, backend)`: the ranks of each role, their torch devices and each rank's Ray GPU
  request;
- `plan_cpus(roles, placements, threads, env_workers, capacity)`: the Ray CPU request of each role's ranks and
  of an env worker; `cpu_threads`: a role's torch threads;
- `model_folder(pretrain_path, roles)`: the model folder every role loads (a GGUF converted once);
  `roles_model` resolves the run's `pretrain` first;
- `plan_roles(spawn, capacity)`: all of it, one `RolePlan` per role with a worker of its own.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.runtime.cluster import ClusterError, CpuCapacity
from roll_pipeline.runtime.gpu_pool import GpuSlots, plan_gpu_pool
from roll_pipeline.runtime.workers import RolePlan, SpawnSettings

__all__ = [
    "ENV_WORKER_CPUS",
    "TRAINED_ROLES",
    "CpuPlan",
    "Placement",
    "cpu_threads",
    "model_folder",
    "plan_cpus",
    "plan_placement",
    "plan_roles",
    "roles_model",
    "strategy_kwargs",
]

ENV_WORKER_CPUS = 0.05
"""CPUs an env worker's actor asks Ray for: its loops step text envs and build prompts between turns and
otherwise wait for the policy (a few percent of a core)."""

TRAINED_ROLES = ("actor_train", "critic")
"""The roles that train, and so may run several data-parallel ranks (`WorkerConfig.data_parallel_size`)."""


def cpu_threads(configured: int | None, device: str, share: float = 1.0) -> int | None:
    """Threads of a role: as configured, else `share` of the cores on the CPU (a Ray actor would get 1)."""
    if configured is not None or device != "cpu":
        return configured
    return max(1, round((os.cpu_count() or 1) * share))


def strategy_kwargs(role: WorkerConfig, share_prefix: bool = False) -> dict[str, Any]:
    """The role worker's `strategy_name` / `strategy_config` arguments, and `share_prefix` (the run's: the
    strategy computes the tokens that rows share from their start once)."""
    return {
        "strategy_name": role.strategy_args.strategy_name,
        "strategy_config": dict(role.strategy_args.strategy_config),
        "share_prefix": share_prefix,
    }


@dataclass(frozen=True)
class Placement:
    """Where one role's worker runs (each of its ranks' workers, for a trained role with several)."""

    device: str
    """torch device inside the worker: "cpu", "cuda" (Ray picks the GPU via CUDA_VISIBLE_DEVICES), "cuda:N"."""
    num_gpus: float
    """GPUs each of the role's Ray actors asks for (0 on the CPU and in-process)."""
    ranks: int = 1
    """Data-parallel ranks: one worker each (`WorkerConfig.data_parallel_size` for a trained role, else 1)."""
    devices: tuple[str, ...] = ()
    """Each rank's torch device where they differ (in-process GPUs: "cuda:<device_mapping[r]>"); empty: every
    rank uses `device`."""
    gpus: tuple[int, ...] = ()
    """Under Ray, the GPU pool's GPUs (`runtime.gpu_pool`): rank r's is `gpus[r]` for a role with ranks, else
    the worker runs on all of them; empty on the CPU, in-process and for a role asking for no GPU."""

    def device_of(self, rank: int) -> str:
        """The torch device of rank `rank`."""
        return self.devices[rank] if self.devices else self.device


def plan_placement(roles: Mapping[str, WorkerConfig], backend: str) -> dict[str, Placement]:
    """Ranks, devices and each rank's Ray GPU request of each role.

    A trained role (`TRAINED_ROLES`) runs `data_parallel_size` ranks: one per `device_mapping` GPU on GPUs,
    `world_size` on the CPU; the other roles run one worker on all their GPUs.

    - an empty `device_mapping`: the CPU, no GPU;
    - in-process (`backend="local"`): `cuda:<first index>` (rank r of a trained role: `cuda:<index r>`), no Ray
      request;
    - under Ray: `num_gpus_per_worker` when set; otherwise the role's GPUs (a rank's: one) divided among the
      roles mapped to them (colocated roles share a GPU: 3 roles on [0] ask for 1/3 each; a role alone on [1]
      asks for 1); `gpus` places them in the run's GPU pool (rank r on `device_mapping[r]`, one worker on all
      its distinct GPUs).
    """
    per_gpu = Counter(gpu for role in roles.values() for gpu in set(role.device_mapping))
    placements = {}
    for name, role in roles.items():
        mapping = role.device_mapping
        ranks = role.data_parallel_size if name in TRAINED_ROLES else 1
        gpus = 1 if ranks > 1 else len(set(mapping))  # a rank trains on one GPU
        if not mapping:
            placements[name] = Placement("cpu", 0.0, ranks)
        elif backend == "local":
            devices = tuple(f"cuda:{gpu}" for gpu in mapping) if ranks > 1 else ()
            placements[name] = Placement(f"cuda:{mapping[0]}", 0.0, ranks, devices)
        else:
            pool = tuple(mapping) if ranks > 1 else tuple(dict.fromkeys(mapping))
            if role.num_gpus_per_worker is not None:
                share = float(role.num_gpus_per_worker)
            else:
                share = gpus / max(per_gpu[gpu] for gpu in mapping)
            placements[name] = Placement("cuda", share, ranks, gpus=pool if share > 0 else ())
    return placements


@dataclass(frozen=True)
class CpuPlan:
    """The CPUs each actor asks Ray for."""

    roles: dict[str, float]
    """Role name -> its actor's request (each rank's, for a role with several)."""
    env_worker: float
    """The request of each env worker."""
    problem: str | None = None
    """Why the requests do not fit the cluster, with the fix (None: they fit, or in-process)."""


def plan_cpus(
    roles: Mapping[str, WorkerConfig],
    placements: Mapping[str, Placement],
    threads: Mapping[str, int | None],
    env_workers: int,
    capacity: CpuCapacity | None,
) -> CpuPlan:
    """The CPU request of each role's actor (of each of its ranks: every rank takes the role's entry) and of
    each env worker, so Ray places and limits them by CPU.

    - a role whose `num_threads` is set asks for that many (the torch threads it runs);
    - a GPU role without `num_threads` asks for 1 (the thread that feeds its GPU);
    - an env worker asks for `ENV_WORKER_CPUS`;
    - a CPU role without `num_threads` (the default: `threads[name]` threads, a share of the machine's cores
      that such roles take turns on) asks for an equal share, per rank, of the CPUs the others leave free, at
      most its thread count: on a 2-core machine the default run fits, on a large node each gets its threads.

    Requests above 1 are whole numbers (Ray's rule). `capacity` None (in-process): no request matters, and
    the defaults ask for their threads.
    """
    ranks = {name: placements[name].ranks for name in roles}
    fixed = {
        name: float(role.num_threads if role.num_threads is not None else 1)
        for name, role in roles.items()
        if role.num_threads is not None or placements[name].device != "cpu"
    }
    shared = [name for name in roles if name not in fixed]
    if capacity is None:
        return CpuPlan({**fixed, **{n: float(threads[n] or 1) for n in shared}}, ENV_WORKER_CPUS)
    taken = sum(cpus * ranks[n] for n, cpus in fixed.items()) + env_workers * ENV_WORKER_CPUS
    free = capacity.available - taken
    shared_ranks = sum(ranks[n] for n in shared)
    each = _whole_above_one(min(free / shared_ranks, capacity.largest_node)) if shared else 0.0
    requests = {**fixed, **{n: min(float(threads[n] or 1), each) for n in shared}}
    problem = _fit_problem(requests, ranks, fixed, env_workers, capacity, each)
    return CpuPlan(requests, ENV_WORKER_CPUS, problem)


def _whole_above_one(cpus: float) -> float:
    """Ray takes a fraction below 1 (to 1e-4) or a whole number: floor to that."""
    return float(math.floor(cpus + 1e-9)) if cpus >= 1 else math.floor(max(cpus, 0.0) * 100 + 1e-6) / 100


def _fit_problem(
    requests: Mapping[str, float],
    ranks: Mapping[str, int],
    fixed: Mapping[str, float],
    env_workers: int,
    capacity: CpuCapacity,
    shared_each: float,
) -> str | None:
    """Why the requests cannot all be placed, with the fix; None when they can."""
    problems = [
        f"{name} asks for {cpus:g} CPUs, more than the largest node has ({capacity.largest_node:g})"
        for name, cpus in fixed.items()
        if cpus > capacity.largest_node
    ]
    total = sum(cpus * ranks[name] for name, cpus in requests.items()) + env_workers * ENV_WORKER_CPUS
    if total > capacity.available + 1e-9 or (len(requests) > len(fixed) and shared_each <= 0):
        asks = ", ".join(
            f"{name} {f'{ranks[name]} ranks x ' if ranks[name] > 1 else ''}{cpus:g}"
            for name, cpus in requests.items()
        )
        problems.append(
            f"the actors ask Ray for more CPUs than are free ({capacity.available:g}): {asks}, and"
            f" {env_workers} env workers x {ENV_WORKER_CPUS:g}"
        )
    if not problems:
        return None
    return (
        f"{'; '.join(problems)}. A role with num_threads asks for that many CPUs per rank (a GPU role without it"
        " for 1), and the CPU roles without it share what is left. Fix: lower the roles' num_threads (or leave"
        " them null on the CPU) or world_size, raise *_env_manager.max_env_num_per_worker (fewer env workers),"
        " give a local Ray instance more CPUs (cluster.num_cpus), or add nodes."
    )


def model_folder(pretrain_path: str | Path, roles: Mapping[str, WorkerConfig]) -> Path | str:
    """The folder every role loads: `pretrain_path`, or the cached HF conversion of the roles' `gguf_file`.

    The roles share one model, so they must name the same file (or leave `gguf_file` null).
    """
    files = {role.model_args.gguf_file for role in roles.values()} - {None}
    if not files:
        return pretrain_path
    if len(files) > 1:
        raise ValueError(
            f"Expected one model_args.gguf_file for all roles (they load one model), got "
            f"{ {n: r.model_args.gguf_file for n, r in roles.items()} }; set the same file, or null, in each."
        )
    from roll_strategies import ensure_model_folder

    return ensure_model_folder(pretrain_path, files.pop())


def roles_model(pretrain: str, seed: int, roles: Mapping[str, WorkerConfig]) -> Path | str:
    """The model folder `roles` load (a builtin model built once, a hub snapshot, a GGUF converted once): they
    share one model, so they name the same `gguf_file` or none (`model_folder`)."""
    gguf = next((r.model_args.gguf_file for r in roles.values() if r.model_args.gguf_file), None)
    # a hub repo's snapshot holds only that GGUF file
    return model_folder(resolve_pretrain(pretrain, seed=seed, gguf_file=gguf), roles)


def optimiser_kwargs(role: WorkerConfig) -> dict[str, Any]:
    """The optimiser arguments of a trained role's strategy."""
    from roll_strategies import OptimizerSettings  # a frozen dataclass of numbers: it pickles to the ranks

    targs = role.training_args
    settings = OptimizerSettings(
        learning_rate=targs.learning_rate,
        weight_decay=targs.weight_decay,
        betas=(targs.adam_beta1, targs.adam_beta2),
        eps=targs.adam_epsilon,
        max_grad_norm=targs.max_grad_norm,
        warmup_steps=targs.warmup_steps,
    )
    return {"optimizer": settings}


def plan_roles(spawn: SpawnSettings, capacity: CpuCapacity | None) -> tuple[dict[str, RolePlan], CpuPlan]:
    """The plan of each role with a worker of its own (`spawn.names`) and the CPU plan they share.

    CPU requests a local Ray instance cannot hold stop the run here with the fix (`ClusterError`); on an
    existing cluster, which may grow or free CPUs, they are a warning. Under Ray the roles on GPUs share one GPU
    pool (`runtime.gpu_pool`): a bundle per device_mapping GPU holding the CPUs of the workers that run there.
    """
    placements = plan_placement(spawn.roles, spawn.backend)
    # a role's ranks split its share of the cores
    threads = {
        n: cpu_threads(
            spawn.roles[n].num_threads, placements[n].device, spawn.thread_share / placements[n].ranks
        )
        for n in spawn.names
    }
    cpus = plan_cpus(
        {n: spawn.roles[n] for n in spawn.names}, placements, threads, spawn.env_workers, capacity
    )
    if cpus.problem and capacity is not None and not capacity.can_grow:
        raise ClusterError(cpus.problem)
    if cpus.problem:
        from tqdm.auto import tqdm

        tqdm.write(f"[roll] WARNING: {cpus.problem}")
    pool = plan_gpu_pool(
        (placements[n].gpus[r : r + 1] if placements[n].ranks > 1 else placements[n].gpus, cpus.roles[n])
        for n in spawn.names
        for r in range(placements[n].ranks)
        if placements[n].gpus
    )
    plans = {}
    for name in spawn.names:
        role, placement = spawn.roles[name], placements[name]
        plans[name] = RolePlan(
            device=placement.device,
            num_gpus=placement.num_gpus,
            ranks=placement.ranks,
            rank_devices=tuple(placement.device_of(r) for r in range(placement.ranks)),
            num_cpus=cpus.roles[name],
            num_threads=threads[name],
            dtype=role.model_args.dtype,
            strategy=strategy_kwargs(role, spawn.share_prefix),
            optimizer=optimiser_kwargs(role) if name in TRAINED_ROLES else {},
            gpus=GpuSlots(pool, placement.gpus) if placement.gpus else None,
        )
    return plans, cpus
