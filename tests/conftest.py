"""Shared fixtures of the cross-package tests: one local Ray instance per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance without dashboard, shared by every `ray` test (ray.init costs 8-18 s)."""
    from roll_pipeline.runtime.cluster import disable_uv_runtime_env

    disable_uv_runtime_env()  # before ray is imported
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            address="local",  # a fresh instance: never a cluster another process left running on the machine
            num_cpus=2,
            # Declared (not detected) GPUs: placement tests check the GPU shares Ray gives actors on any machine;
            # no other test asks Ray for a GPU.
            num_gpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
        )
    yield ray
    ray.shutdown()
