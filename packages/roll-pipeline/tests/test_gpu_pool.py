"""The GPU pool without Ray: which bundles a run reserves, where each role's workers go in it, and the
mappings `roll config` refuses because the pool cannot place them (the Ray side: tests/test_gpu_pool_ray.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.gpu_pool import GpuPool, GpuSlots, plan_gpu_pool
from roll_pipeline.runtime.placement import plan_roles
from roll_pipeline.runtime.workers import SpawnSettings


def _problems(**overrides: object) -> str:
    with pytest.raises(ValidationError) as err:
        tiny_config(**overrides)
    return str(err.value)


def _plans(backend: str, **mappings: list[int]):
    roles = {name: WorkerConfig(device_mapping=m) for name, m in mappings.items()}
    plans, _ = plan_roles(SpawnSettings(roles, list(roles), backend, 1.0, 0), None)
    return plans


def test_a_bundle_per_gpu_index_holding_the_cpus_of_the_workers_that_run_there():
    pool = plan_gpu_pool([((0,), 1.0), ((1,), 1.0), ((0, 1), 2.0), ((3,), 0.0)])
    assert pool == GpuPool(gpus=(0, 1, 3), cpus=(3.0, 1.0, 0.01))
    assert pool.bundle_of(3) == 2


def test_colocated_roles_get_one_pool_rank_r_on_gpu_r_and_a_multi_gpu_worker_all_its_gpus():
    plans = _plans("ray", actor_train=[0, 1], actor_infer=[1, 0, 2])
    train, infer = plans["actor_train"], plans["actor_infer"]
    assert train.gpus is not None and infer.gpus is not None
    assert train.gpus.pool is infer.gpus.pool and train.gpus.pool.gpus == (0, 1, 2)
    assert train.gpus.gpus == (0, 1) and infer.gpus.gpus == (1, 0, 2)
    assert (train.num_gpus, infer.num_gpus) == (0.5, 1.5)  # each GPU shared by 2: half of each of 3


def test_the_cpu_and_in_process_runs_have_no_pool():
    assert _plans("ray", actor_train=[], actor_infer=[])["actor_train"].gpus is None
    local = _plans("local", actor_train=[0, 1], actor_infer=[0])
    assert local["actor_train"].gpus is None and local["actor_train"].rank_devices == ("cuda:0", "cuda:1")
    assert GpuSlots(GpuPool((0,), (1.0,)), (0,)).gpus == (0,)


def test_a_worker_asking_for_more_gpus_than_it_is_mapped_to_is_refused():
    message = _problems(actor_infer={"device_mapping": [2, 3], "num_gpus_per_worker": 3})
    assert "actor_infer.num_gpus_per_worker=3 asks for more GPUs than its device_mapping=[2, 3]" in message
    assert "set it <= 2" in message


def test_colocated_shares_above_a_whole_gpu_are_refused_naming_the_gpu_and_roles():
    message = _problems(
        actor_train={"device_mapping": [0], "num_gpus_per_worker": 0.75},
        actor_infer={"device_mapping": [0], "num_gpus_per_worker": 0.5},
    )
    assert "GPU 0 is asked for more than one GPU in all by the roles mapped to it" in message
    assert "actor_train 0.75, actor_infer 0.5" in message


def test_ranks_repeating_a_gpu_are_refused():
    assert "lists a GPU twice" in _problems(actor_train={"device_mapping": [0, 0]})


def test_in_process_the_shares_are_not_checked():
    tiny_config(
        cluster={"backend": "local"},
        actor_train={"device_mapping": [0], "num_gpus_per_worker": 1},
        actor_infer={"device_mapping": [0], "num_gpus_per_worker": 1},
    )
