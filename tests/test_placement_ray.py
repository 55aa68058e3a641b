"""Placement under Ray: the actors of each layout are created with the GPU shares `plan_placement` gives.

Ray's own accounting is the reference: each actor reports `get_assigned_resources()` and the GPU ids Ray
gave it. No GPU is needed: the session's Ray instance declares two (tests/conftest.py), and Ray schedules
on declared resources.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.cluster import RayCluster
from roll_pipeline.runtime.placement import plan_placement

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Probe:
    """Reports the device it was given and what Ray assigned to its actor."""

    def __init__(self, device: str, data_parallel: Any = None) -> None:
        self.device, self.data_parallel = device, data_parallel

    def report(self) -> dict[str, Any]:
        import ray

        return {
            "device": self.device,
            "data_parallel": self.data_parallel,
            "resources": ray.get_runtime_context().get_assigned_resources(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        }


LAYOUTS = {
    "colocated": {"actor_train": [0], "actor_infer": [0], "reference": [0]},
    "separate": {"actor_train": [0], "actor_infer": [1], "reference": []},
}


def _spawn_layout(ray: Any, roles: dict[str, WorkerConfig]) -> dict[str, dict[str, Any]]:
    cluster = RayCluster()
    try:
        handles = {
            name: cluster.spawn(Probe, p.device, name=name, num_cpus=0, num_gpus=p.num_gpus)
            for name, p in plan_placement(roles, "ray").items()
        }
        return {name: ray.get(h.report.remote(), timeout=120) for name, h in handles.items()}
    finally:
        cluster.shutdown()


def _gpus(report: dict[str, Any]) -> float:
    return report["resources"].get("GPU", 0.0)


@pytest.fixture()
def ray(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Probe travels by value
    return ray_session


def test_colocated_roles_share_one_gpu(ray):
    got = _spawn_layout(ray, {n: WorkerConfig(device_mapping=m) for n, m in LAYOUTS["colocated"].items()})
    assert [_gpus(r) for r in got.values()] == pytest.approx([1 / 3] * 3, abs=1e-4)
    assert all(r["device"] == "cuda" and len(r["gpu_ids"]) == 1 for r in got.values())


def test_separate_roles_get_whole_gpus_and_cpu_roles_none(ray):
    got = _spawn_layout(ray, {n: WorkerConfig(device_mapping=m) for n, m in LAYOUTS["separate"].items()})
    assert _gpus(got["actor_train"]) == _gpus(got["actor_infer"]) == 1.0
    assert got["actor_train"]["gpu_ids"] != got["actor_infer"]["gpu_ids"]
    assert _gpus(got["reference"]) == 0.0 and got["reference"]["device"] == "cpu"
    assert got["reference"]["gpu_ids"] == []


def test_num_gpus_per_worker_is_what_the_actor_gets(ray):
    roles = {
        "actor_train": WorkerConfig(device_mapping=[0], num_gpus_per_worker=0.25),
        "actor_infer": WorkerConfig(device_mapping=[0], num_gpus_per_worker=0.5),
    }
    got = _spawn_layout(ray, roles)
    assert _gpus(got["actor_train"]) == 0.25 and _gpus(got["actor_infer"]) == 0.5


def test_an_untrained_role_alone_on_two_gpus_gets_both(ray):
    got = _spawn_layout(ray, {"actor_infer": WorkerConfig(device_mapping=[0, 1])})
    assert _gpus(got["actor_infer"]) == 2.0 and len(got["actor_infer"]["gpu_ids"]) == 2


def test_a_trained_role_on_two_gpus_is_two_ranks_of_one_gpu_each_meeting_at_rank_0(ray):
    placement = plan_placement({"actor_train": WorkerConfig(device_mapping=[0, 1])}, "ray")["actor_train"]
    cluster = RayCluster()
    try:
        handles = cluster.spawn_ranks(
            Probe,
            name="actor_train",
            rank_kwargs=[{"device": placement.device_of(r)} for r in range(placement.ranks)],
            num_cpus=0,
            num_gpus=placement.num_gpus,
        )
        got = [ray.get(h.report.remote(), timeout=120) for h in handles]
    finally:
        cluster.shutdown()
    assert [_gpus(r) for r in got] == [1.0, 1.0] and got[0]["gpu_ids"] != got[1]["gpu_ids"]
    specs = [r["data_parallel"] for r in got]
    assert [(s.rank, s.world_size) for s in specs] == [(0, 2), (1, 2)]
    assert specs[0].master_addr == specs[1].master_addr == ray.util.get_node_ip_address()
    assert specs[0].master_port == specs[1].master_port > 0
