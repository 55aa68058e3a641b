"""Which roles the pipeline offloads (`config.colocation.offloaded_roles`) and how `TrainerOffloader` calls them."""

from __future__ import annotations

import asyncio
from typing import Any

from roll_pipeline.config.colocation import offloaded_roles
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.trainer_offload import TrainerOffloader
from roll_strategies.train.offload import OffloadReport


def _roles(**mappings: list[int]) -> dict[str, WorkerConfig]:
    return {name: WorkerConfig(device_mapping=gpus) for name, gpus in mappings.items()}


def test_only_roles_sharing_a_gpu_with_actor_infer_are_offloaded():
    roles = _roles(actor_train=[0, 1], actor_infer=[1, 2], critic=[3], reference=[2])
    names = ["actor_train", "actor_infer", "critic", "reference"]
    assert offloaded_roles(roles, names) == ("actor_train", "reference")
    # a role the run does not spawn (the reference held by the trainer) is not asked
    assert offloaded_roles(roles, ["actor_train", "actor_infer", "critic"]) == ("actor_train",)


def test_nothing_is_offloaded_on_the_cpu_or_on_separate_gpus():
    names = ["actor_train", "actor_infer", "critic"]
    assert offloaded_roles(_roles(actor_train=[], actor_infer=[], critic=[]), names) == ()
    assert offloaded_roles(_roles(actor_train=[0], actor_infer=[1], critic=[2]), names) == ()


def test_offload_when_colocated_false_keeps_a_role_on_its_gpu():
    roles = _roles(actor_train=[0], actor_infer=[0], critic=[0])
    roles["critic"] = WorkerConfig(device_mapping=[0], offload_when_colocated=False)
    assert offloaded_roles(roles, ["actor_train", "actor_infer", "critic"]) == ("actor_train",)


class _Group:
    """A RankGroup stand-in: `ranks` ranks, each answering with a fixed report."""

    def __init__(self, ranks: int, unavailable: str | None = None) -> None:
        self.ranks, self.unavailable, self.calls = ranks, unavailable, []

    async def call_main(self, method: str) -> Any:
        self.calls.append(method)
        return self.unavailable

    async def call_all(self, method: str) -> list[OffloadReport]:
        self.calls.append(method)
        return [OffloadReport(0.01, 2**29, 2**28)] * self.ranks


def test_offloader_moves_every_usable_group_and_reports_the_step_metrics():
    actor, critic, reference = _Group(2), _Group(1), _Group(1, unavailable="HFInferStrategy has no offload")
    logs: list[str] = []
    offloader = TrainerOffloader(
        {"actor_train": actor, "critic": critic, "reference": reference}, logs.append
    )

    async def scenario() -> list[dict[str, float]]:
        return [
            await offloader.reload(),  # nothing offloaded yet: nothing to do
            await offloader.offload(),
            await offloader.offload(),  # idempotent
            await offloader.reload(),
        ]

    before_reload, offloaded, again, reloaded = asyncio.run(scenario())
    assert before_reload == {} and again == {}
    assert offloaded["memory/offloaded_gb"] == 1.5  # 3 ranks x 0.5 GiB
    assert offloaded["memory/offload_gpu_freed_gb"] == 0.75
    assert offloaded["time/offload_s"] >= 0 and reloaded["time/reload_s"] >= 0
    assert actor.calls == ["offload_unavailable", "offload", "reload"]
    assert reference.calls == ["offload_unavailable"]  # asked once, then left on its GPU
    assert len(logs) == 1 and "reference" in logs[0] and "HFInferStrategy has no offload" in logs[0]


def test_an_offloader_without_roles_does_nothing():
    offloader = TrainerOffloader({}, print)
    assert asyncio.run(offloader.offload()) == {} and asyncio.run(offloader.reload()) == {}
