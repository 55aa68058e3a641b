"""`plan_cpus`: what each actor asks Ray for, so Ray can place and limit workers by CPU on a cluster while the
default run still fits a 2-core machine's local instance."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime import rollout as rollout_module
from roll_pipeline.runtime.cluster import CpuCapacity
from roll_pipeline.runtime.placement import ENV_WORKER_CPUS, Placement, plan_cpus

CPU, GPU = Placement("cpu", 0.0), Placement("cuda", 1.0)


def _plan(roles: dict[str, tuple[WorkerConfig, Placement, int | None]], env_workers: int, capacity: Any):
    return plan_cpus(
        {n: r for n, (r, _, _) in roles.items()},
        {n: p for n, (_, p, _) in roles.items()},
        {n: t for n, (_, _, t) in roles.items()},
        env_workers,
        capacity,
    )


def test_cpu_roles_without_num_threads_share_what_a_small_machine_has_left():
    # the default run on 2 cores: asynchronous rollout, 1 thread per role, 2 + 2 env workers
    roles = {"actor_train": (WorkerConfig(), CPU, 1), "actor_infer": (WorkerConfig(), CPU, 1)}
    plan = _plan(roles, 4, CpuCapacity(2.0, 2.0, can_grow=False))
    assert plan.roles == {"actor_train": 0.9, "actor_infer": 0.9}
    assert plan.env_worker == ENV_WORKER_CPUS == 0.05
    assert plan.problem is None
    assert sum(plan.roles.values()) + 4 * plan.env_worker <= 2.0


def test_on_a_large_node_they_ask_for_their_threads_in_whole_cpus():
    roles = {"actor_train": (WorkerConfig(), CPU, 64), "actor_infer": (WorkerConfig(), CPU, 64)}
    plan = _plan(roles, 4, CpuCapacity(64.0, 64.0, can_grow=False))
    assert plan.roles == {"actor_train": 31.0, "actor_infer": 31.0}  # (64 - 0.2) / 2, whole above 1
    plan = _plan({"actor_train": (WorkerConfig(), CPU, 8)}, 4, CpuCapacity(64.0, 64.0, can_grow=False))
    assert plan.roles == {"actor_train": 8.0}  # never more than the threads it runs
    assert plan.problem is None


def test_num_threads_is_the_request_and_a_gpu_role_without_it_asks_for_one():
    roles = {
        "actor_train": (WorkerConfig(num_threads=4), CPU, 4),
        "actor_infer": (WorkerConfig(device_mapping=[0]), GPU, None),
        "reference": (WorkerConfig(device_mapping=[0], num_threads=2), GPU, 2),
        "critic": (WorkerConfig(), CPU, 16),
    }
    plan = _plan(roles, 10, CpuCapacity(16.0, 16.0, can_grow=False))
    assert plan.roles == {"actor_train": 4.0, "actor_infer": 1.0, "reference": 2.0, "critic": 8.0}
    assert plan.problem is None


def test_requests_that_cannot_fit_name_the_role_and_the_fix():
    roles = {"actor_train": (WorkerConfig(num_threads=8), CPU, 8), "actor_infer": (WorkerConfig(), CPU, 1)}
    plan = _plan(roles, 4, CpuCapacity(2.0, 2.0, can_grow=False))
    assert plan.problem is not None
    assert "actor_train asks for 8 CPUs, more than the largest node has (2)" in plan.problem
    assert "more CPUs than are free (2)" in plan.problem
    for fix in ("num_threads", "max_env_num_per_worker", "cluster.num_cpus", "add nodes"):
        assert fix in plan.problem
    # too many env workers leave the roles nothing
    plan = _plan({"actor_train": (WorkerConfig(), CPU, 1)}, 40, CpuCapacity(2.0, 2.0, can_grow=False))
    assert plan.roles == {"actor_train": 0.0} and "40 env workers x 0.05" in (plan.problem or "")


def test_in_process_there_is_nothing_to_fit():
    plan = _plan({"actor_train": (WorkerConfig(), CPU, 3)}, 100, None)
    assert plan.roles == {"actor_train": 3.0} and plan.problem is None


@pytest.mark.parametrize("validation", [False, True])
def test_env_workers_ask_for_env_worker_cpus(monkeypatch, validation):
    """`build_scheduler`'s spawn (what the scheduler calls for each env worker) asks for ENV_WORKER_CPUS."""
    captured: dict[str, Any] = {}
    monkeypatch.setattr(
        rollout_module, "RolloutScheduler", lambda layout, spawn, *a, **k: captured.setdefault("spawn", spawn)
    )
    asked: dict[str, float] = {}

    class Recording:
        def spawn(self, cls: type, *args: Any, name: str, num_cpus: float = 0, **kwargs: Any) -> str:
            asked[name] = num_cpus
            return name

        def remote_method(self, handle: Any, method: str) -> Any:
            return None

    from roll_pipeline import tiny_config
    from roll_pipeline.assembly.settings import rollout_settings

    cfg = tiny_config()
    manager = cfg.val_env_manager if validation else cfg.train_env_manager
    settings = rollout_settings(cfg)
    rollout_module.build_scheduler(
        settings, manager, Recording(), SimpleNamespace(), None, validation=validation, seed=0, name="x"
    )
    captured["spawn"](0)
    assert asked == {"x_env_0": ENV_WORKER_CPUS}
