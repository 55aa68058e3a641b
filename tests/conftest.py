"""Shared fixtures of the cross-package tests: one local Ray instance per test session, and the one pair of
resumed runs under Ray that two test files read."""

from __future__ import annotations

import pytest
from small_runs import ResumedRuns, resume_under_ray

SESSION_RAY = {
    "address": "local",  # a fresh instance: never a cluster another process left running on the machine
    "num_cpus": 2,
    # Declared (not detected) GPUs: placement tests check the GPU shares Ray gives actors on any machine;
    # no other test asks Ray for a GPU.
    "num_gpus": 2,
    "include_dashboard": False,
    "log_to_driver": False,
    "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
}
"""How `ray_session` starts Ray."""


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance without dashboard, shared by every `ray` test (ray.init costs 8-18 s)."""
    from roll_pipeline.runtime.cluster import disable_uv_runtime_env

    disable_uv_runtime_env()  # before ray is imported
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(**SESSION_RAY)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_four_gpus():
    """A local Ray instance of its own for one module: 4 declared GPUs and 8 declared CPUs (Ray only counts
    them: the GPU-pool tests place whole-GPU bundles that need 1 CPU per GPU worker). The session's instance,
    when running, is stopped for the module and started again after it."""
    from roll_pipeline.runtime.cluster import disable_uv_runtime_env

    disable_uv_runtime_env()
    ray = pytest.importorskip("ray")
    was_running = ray.is_initialized()
    ray.shutdown()
    ray.init(**{**SESSION_RAY, "num_cpus": 8, "num_gpus": 4})
    yield ray
    ray.shutdown()
    if was_running:
        ray.init(**SESSION_RAY)


@pytest.fixture(scope="session")
def resumed_under_ray(ray_session, tmp_path_factory) -> ResumedRuns:
    """Two data-parallel ranks under Ray, 4 steps, and a resume from step 2 (`small_runs.resume_under_ray`): run
    once for both tests that read it (each pipeline run starts its Ray actors, about 2 minutes on 2 cores)."""
    return resume_under_ray(tmp_path_factory.mktemp("resumed_under_ray"))
