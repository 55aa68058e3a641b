"""The pipeline spawns each role with its backend, the placement `plan_placement` computes and the CPUs
`plan_cpus` gives it (no Ray here: a recording cluster stands in, so no worker is built)."""

from __future__ import annotations

from typing import Any

import pytest
from roll_pipeline import pipeline as pipeline_module
from roll_pipeline.assembly import parts as parts_module
from roll_pipeline.config.compose import compose
from roll_pipeline.runtime import placement as placement_module
from roll_pipeline.runtime.cluster import ClusterError, CpuCapacity, LocalCluster


class RecordingCluster:
    """Records what `spawn` is asked for; builds nothing. `capacity` is what a Ray cluster would report."""

    def __init__(self, capacity: CpuCapacity | None = None) -> None:
        self.spawned: dict[str, dict[str, Any]] = {}
        self.capacity = capacity

    def spawn(
        self, cls: type, *args: Any, name: str, num_cpus: float = 0, num_gpus: float = 0, **kwargs: Any
    ):
        self.spawned[name] = {"cls": cls.__name__, "num_cpus": num_cpus, "num_gpus": num_gpus, **kwargs}
        return name

    def remote_method(self, handle: Any, method: str) -> Any:
        return lambda *args: None

    def on_each_node(self, cls: type, method: str, *args: Any) -> dict[str, Any]:
        return LocalCluster().on_each_node(cls, method, *args)

    def cpu_capacity(self) -> CpuCapacity | None:
        return self.capacity

    def shutdown(self) -> None:
        pass


@pytest.mark.slow  # builds the cached builtin tiny model on first use
def test_roles_are_spawned_with_their_strategy_and_gpu_share(tmp_path, monkeypatch):
    cluster = RecordingCluster()
    monkeypatch.setattr(parts_module, "make_cluster", lambda *args: cluster)
    cfg = compose(
        None,
        None,
        [
            f"output_dir={tmp_path}",
            "track_with=[]",
            "kl_penalty=k3",  # a sampled KL: the reference is its own worker (the exact one runs in the trainer)
            "actor_train.device_mapping=[0]",
            "actor_infer.device_mapping=[0]",
            "reference.device_mapping=[1]",
            "actor_infer.num_gpus_per_worker=0.25",
            "actor_train.strategy_args.strategy_name=deepspeed_train",
            "+actor_train.strategy_args.strategy_config={zero_optimization: {stage: 3}}",
        ],
    )
    pipeline_module.AgenticPipeline(cfg, progress=False)
    train, infer, ref = (cluster.spawned[n] for n in ("actor_train", "actor_infer", "reference"))
    assert (train["cls"], infer["cls"], ref["cls"]) == ("ActorTrainWorker", "PolicyServer", "ReferenceWorker")
    assert (train["num_gpus"], infer["num_gpus"], ref["num_gpus"]) == (0.5, 0.25, 1.0)
    assert train["device"] == infer["device"] == ref["device"] == "cuda"
    assert train["strategy_name"] == "deepspeed_train"
    assert train["strategy_config"] == {"zero_optimization": {"stage": 3}}
    assert (infer["strategy_name"], ref["strategy_name"]) == ("hf_infer", "hf_infer")
    assert infer["strategy_config"] == ref["strategy_config"] == {}


def _pipeline(tmp_path, monkeypatch, cluster: RecordingCluster, *overrides: str) -> Any:
    monkeypatch.setattr(parts_module, "make_cluster", lambda *args: cluster)
    cfg = compose(None, None, [f"output_dir={tmp_path}", "track_with=[]", *overrides])
    return pipeline_module.AgenticPipeline(cfg, progress=False)


@pytest.mark.slow  # builds the cached builtin tiny model on first use
def test_the_default_run_fits_a_two_core_local_ray_instance(tmp_path, monkeypatch):
    """The default config (asynchronous rollout: each CPU role runs on half the cores) on the 2 CPUs a local
    instance has on a 2-core laptop: the roles share what the 4 env workers leave."""
    monkeypatch.setattr(placement_module.os, "cpu_count", lambda: 2)
    cluster = RecordingCluster(CpuCapacity(available=2.0, largest_node=2.0, can_grow=False))
    pipeline = _pipeline(tmp_path, monkeypatch, cluster)
    asked = {name: spawn["num_cpus"] for name, spawn in cluster.spawned.items()}
    assert asked == {"actor_train": 0.9, "actor_infer": 0.9}  # (2 - 4 x 0.05) / 2
    assert {cluster.spawned[n]["num_threads"] for n in asked} == {1}
    assert pipeline.parts.cpus.env_worker == 0.05


@pytest.mark.slow  # builds the cached builtin tiny model on first use
def test_roles_ask_for_their_num_threads_and_a_plan_that_cannot_fit_stops_before_any_worker(
    tmp_path, monkeypatch
):
    big = RecordingCluster(CpuCapacity(available=32.0, largest_node=16.0, can_grow=False))
    _pipeline(tmp_path, monkeypatch, big, "actor_train.num_threads=6", "actor_infer.num_threads=2")
    assert (big.spawned["actor_train"]["num_cpus"], big.spawned["actor_infer"]["num_cpus"]) == (6, 2)
    assert big.spawned["actor_train"]["num_threads"] == 6
    small = RecordingCluster(CpuCapacity(available=2.0, largest_node=2.0, can_grow=False))
    with pytest.raises(ClusterError, match=r"actor_train asks for 6 CPUs.*cluster\.num_cpus"):
        _pipeline(tmp_path, monkeypatch, small, "actor_train.num_threads=6")
    assert small.spawned == {}


@pytest.mark.slow  # builds the cached builtin tiny model on first use
def test_the_weight_sync_transport_follows_the_placements_and_is_logged(tmp_path, monkeypatch, capsys):
    cpu = _pipeline(tmp_path, monkeypatch, RecordingCluster())
    assert cpu.parts.update_weights.transport == "cpu"
    one_gpu = ("actor_train.device_mapping=[0]", "actor_infer.device_mapping=[0]")
    shared = _pipeline(tmp_path, monkeypatch, RecordingCluster(), *one_gpu)
    assert shared.parts.update_weights.transport == "cuda_ipc"  # Ray actors on one GPU
    apart = _pipeline(tmp_path, monkeypatch, RecordingCluster(), *one_gpu, "actor_infer.device_mapping=[1]")
    assert apart.parts.update_weights.transport == "cpu"  # nccl would need a process group: the CPU path
    lines = [line for line in capsys.readouterr().out.splitlines() if "weight sync transport" in line]
    assert [line.split()[4] for line in lines] == ["cpu", "cuda_ipc", "cpu"]
    assert "nccl" in lines[2]
