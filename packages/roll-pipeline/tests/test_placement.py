"""The pipeline spawns each role with its backend and the placement `plan_placement` computes (no Ray here:
a recording cluster stands in, so no worker is built)."""

from __future__ import annotations

from typing import Any

import pytest
from roll_pipeline import pipeline as pipeline_module
from roll_pipeline.config.compose import compose


class RecordingCluster:
    """Records what `spawn` is asked for; builds nothing."""

    def __init__(self) -> None:
        self.spawned: dict[str, dict[str, Any]] = {}

    def spawn(
        self, cls: type, *args: Any, name: str, num_cpus: float = 0, num_gpus: float = 0, **kwargs: Any
    ):
        self.spawned[name] = {"cls": cls.__name__, "num_gpus": num_gpus, **kwargs}
        return name

    def remote_method(self, handle: Any, method: str) -> Any:
        return lambda *args: None

    def shutdown(self) -> None:
        pass


@pytest.mark.slow  # builds the cached builtin tiny model on first use
def test_roles_are_spawned_with_their_strategy_and_gpu_share(tmp_path, monkeypatch):
    cluster = RecordingCluster()
    monkeypatch.setattr(pipeline_module, "make_cluster", lambda *args: cluster)
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
