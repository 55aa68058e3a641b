"""The run's GPU pool under Ray: each rank of each role lands on the GPU of its device_mapping index.

The roles are planned and spawned through the pipeline's path (`runtime.placement.plan_roles`,
`runtime.workers.RoleSpawner`, `runtime.cluster.RayCluster`) with probe workers that report the GPU ids Ray
gave them and their CUDA_VISIBLE_DEVICES. No GPU is needed: the module's Ray instance declares 4
(`ray_four_gpus`), and Ray schedules on declared resources.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.cluster import ClusterError, RayCluster
from roll_pipeline.runtime.placement import plan_roles
from roll_pipeline.runtime.workers import RoleSpawner, SpawnSettings

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Probe:
    """Reports what Ray gave its actor; takes whatever a role worker is built with."""

    def __init__(self, model_path: str, device: str, data_parallel: Any = None, **kwargs: Any) -> None:
        self.device, self.data_parallel = device, data_parallel

    def report(self) -> dict[str, Any]:
        import ray

        return {
            "device": self.device,
            "rank": self.data_parallel.rank if self.data_parallel else 0,
            "gpu_ids": sorted(str(g) for g in ray.get_gpu_ids()),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_share": ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0),
        }


@pytest.fixture(scope="module")
def ray(ray_four_gpus):
    ray_four_gpus.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Probe travels by value
    return ray_four_gpus


TRAINED = ("actor_train", "critic")


def _spawn(ray: Any, mappings: dict[str, list[int]], **cluster: Any) -> dict[str, list[dict[str, Any]]]:
    """Each role's reports, rank order, spawned as the pipeline does (trained roles as ranks)."""
    roles = {name: WorkerConfig(device_mapping=m) for name, m in mappings.items()}
    settings = SpawnSettings(roles, list(roles), "ray", thread_share=1.0, env_workers=0)
    run = RayCluster()
    for key, value in cluster.items():
        setattr(run, key, value)
    try:
        plans, _ = plan_roles(settings, run.cpu_capacity())
        spawner = RoleSpawner(plans, run, "model")
        groups = {
            name: spawner.spawn_ranks(Probe, name).ranks if name in TRAINED else [spawner.spawn(Probe, name)]
            for name in roles
        }
        return {  # 300 s: a worker process starts in seconds, but minutes on 2 cores shared with a training run
            name: [ray.get(w.report.remote(), timeout=300) for w in workers]
            for name, workers in groups.items()
        }
    finally:
        run.shutdown()


def _ids(reports: list[dict[str, Any]]) -> list[list[str]]:
    return [r["gpu_ids"] for r in reports]


def test_colocated_train_ranks_and_infer_share_gpu_r_and_the_ranks_do_not(ray):
    got = _spawn(ray, {"actor_train": [0, 1], "actor_infer": [0, 1]})
    train, (infer,) = got["actor_train"], got["actor_infer"]
    assert [r["rank"] for r in train] == [0, 1]
    (gpu0,), (gpu1,) = _ids(train)
    assert gpu0 != gpu1  # NCCL needs a device per rank
    assert [r["visible"] for r in train] == [gpu0, gpu1]  # Ray sets it for one-GPU workers
    assert [r["gpu_share"] for r in train] == [0.5, 0.5]
    # one worker on both GPUs: it sees both, in device_mapping order, and shares each with rank r
    assert infer["visible"] == f"{gpu0},{gpu1}"
    assert infer["gpu_ids"] == [gpu0] and infer["gpu_share"] == 0.5


def test_train_on_two_gpus_and_a_two_gpu_infer_on_two_others(ray):
    got = _spawn(ray, {"actor_train": [0, 1], "actor_infer": [2, 3]})
    train, (infer,) = got["actor_train"], got["actor_infer"]
    train_ids = [i for (i,) in _ids(train)]
    infer_ids = infer["visible"].split(",")
    assert len(set(train_ids)) == 2 and len(set(infer_ids)) == 2
    assert not set(train_ids) & set(infer_ids)  # four GPUs, none shared
    assert [r["gpu_share"] for r in train] == [1.0, 1.0] and infer["gpu_share"] == 1.0


def test_the_reference_is_colocated_with_the_actor(ray):
    got = _spawn(ray, {"actor_train": [0], "actor_infer": [0], "reference": [0]})
    ids = {name: _ids(reports)[0] for name, reports in got.items()}
    assert ids["actor_train"] == ids["actor_infer"] == ids["reference"] and len(ids["reference"]) == 1
    assert [r[0]["gpu_share"] for r in got.values()] == pytest.approx([1 / 3] * 3, abs=1e-4)


def test_colocated_ranks_of_two_trained_roles_pair_up_by_index(ray):
    got = _spawn(ray, {"actor_train": [0, 1], "critic": [1, 0], "actor_infer": [2]})
    actor, critic = _ids(got["actor_train"]), _ids(got["critic"])
    assert actor[0] == critic[1] and actor[1] == critic[0] and actor[0] != actor[1]


def test_a_pool_ray_cannot_reserve_in_time_is_a_cluster_error_naming_its_gpus(ray):
    ray.get(ray.remote(num_cpus=0)(lambda: None).remote())  # the instance is up
    holder = ray.util.placement_group([{"GPU": 1, "CPU": 0.01}] * 3)  # takes 3 of the 4 GPUs
    ray.get(holder.ready(), timeout=60)
    try:
        with pytest.raises(ClusterError, match=r"device_mapping GPUs \[0, 1\].*in 2 s"):
            _spawn(ray, {"actor_train": [0, 1]}, placement_timeout_s=2.0)
    finally:
        ray.util.remove_placement_group(holder)


def test_more_gpus_than_a_local_instance_has_fail_at_once(ray):
    with pytest.raises(ClusterError, match=r"GPUs \[0, 1, 2, 3, 4\] are 5 GPUs, but this Ray instance has 4"):
        _spawn(ray, {"actor_train": [0, 1, 2], "actor_infer": [3, 4]}, _can_grow=False)
