"""One plan per role, decided once per run: devices, GPUs, ranks, CPUs, threads, dtype, backend and optimizer
(`runtime.workers.RolePlan`), from the roles' configs and what the cluster offers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.runtime.cluster import ClusterError, CpuCapacity
from roll_pipeline.runtime.gpu_pool import GpuSlots, plan_gpu_pool
from roll_pipeline.runtime.placement import (
    TRAINED_ROLES,
    CpuPlan,
    cpu_threads,
    model_folder,
    optimiser_kwargs,
    plan_cpus,
    plan_placement,
    strategy_kwargs,
)
from roll_pipeline.runtime.workers import RolePlan, SpawnSettings

__all__ = ["concrete_dtypes", "config_model", "plan_roles", "role_threads"]


def role_threads(role: WorkerConfig, device: str, thread_share: float, ranks: int = 1) -> int | None:
    """A role's torch threads per worker: its share of the cores (a role's ranks split it)."""
    return cpu_threads(role.num_threads, device, thread_share / ranks)


def plan_roles(spawn: SpawnSettings, capacity: CpuCapacity | None) -> tuple[dict[str, RolePlan], CpuPlan]:
    """The plan of each role with a worker of its own (`spawn.names`) and the CPU plan they share.

    CPU requests a local Ray instance cannot hold stop the run here with the fix (`ClusterError`); on an
    existing cluster, which may grow or free CPUs, they are a warning. Under Ray the roles on GPUs share one GPU
    pool (`runtime.gpu_pool`): a bundle per device_mapping GPU holding the CPUs of the workers that run there.
    """
    placements = plan_placement(spawn.roles, spawn.backend)
    threads = {
        n: role_threads(spawn.roles[n], placements[n].device, spawn.thread_share, placements[n].ranks)
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


def concrete_dtypes(config: AgenticConfig, log: Callable[[str], None] = print) -> AgenticConfig:
    """`config` with each role's `model_args.dtype: auto` replaced by what its device computes natively
    (`roll_strategies.choose_dtype`), each choice logged once; every part of the run then reads a concrete
    dtype."""
    from roll_strategies import choose_dtype

    roles = {name: getattr(config, name) for name in ("actor_train", "actor_infer", "reference", "critic")}
    auto = {name: role for name, role in roles.items() if role.model_args.dtype == "auto"}
    placements = plan_placement(auto, config.cluster.backend)
    update, chosen = {}, defaultdict(list)
    for name, role in auto.items():
        dtype, why = choose_dtype("auto", placements[name].device)
        chosen[(dtype, why)].append(name)
        model_args = role.model_args.model_copy(update={"dtype": dtype})
        update[name] = role.model_copy(update={"model_args": model_args})
    for (dtype, why), names in chosen.items():
        log(f"[roll] model_args.dtype auto -> {dtype} for {', '.join(names)} ({why})")
    return config.model_copy(update=update) if update else config


def config_model(config: AgenticConfig, roles: tuple[str, ...] = ("actor_infer",)) -> Path | str:
    """The model folder the config's `roles` load (a builtin model built once, a hub snapshot, a GGUF converted
    once): they share one model, so they name the same `gguf_file` or none."""
    sections = {name: getattr(config, name) for name in roles}
    gguf = next((r.model_args.gguf_file for r in sections.values() if r.model_args.gguf_file), None)
    # a hub repo's snapshot holds only that GGUF file; roles that set one name the same (model_folder)
    return model_folder(resolve_pretrain(config.pretrain, seed=config.seed, gguf_file=gguf), sections)
