"""The pipeline's step order with a sleeping inference engine: rollout, sleep, train, wake, weight sync.

The real pipeline (tiny model, in-process) with the colocation plan forced on and hf_infer's sleep made to
report success on the CPU, so the order is checked where no GPU is: every generate call falls outside the
sleep, every optimiser step inside it, and the engine wakes before each weight sync."""

from __future__ import annotations

import asyncio

import pytest
from roll_pipeline import AgenticPipeline
from roll_pipeline.assembly import parts as parts_module
from roll_pipeline.config.colocation import InferSleep
from roll_strategies import HFInferStrategy, HFTrainStrategy
from small_runs import compact, record_policy_server, run_two_steps_in_process


@pytest.mark.slow
def test_each_step_sleeps_after_the_rollout_and_wakes_before_the_weight_sync(tmp_path, monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(parts_module, "infer_sleep", lambda roles, names: InferSleep(1, ("actor_train",)))

    def sleep(self, level: int = 1) -> bool:
        events.append("sleep")
        return True  # as a GPU engine would

    monkeypatch.setattr(HFInferStrategy, "sleep", sleep)
    monkeypatch.setattr(HFInferStrategy, "wake_up", lambda self: events.append("wake"))
    train_step = HFTrainStrategy.train_step

    def recorded_train_step(self, *args, **kwargs):
        events.append("train")
        return train_step(self, *args, **kwargs)

    monkeypatch.setattr(HFTrainStrategy, "train_step", recorded_train_step)
    record_policy_server(monkeypatch, events)
    pipeline = run_two_steps_in_process(tmp_path)
    compacted = compact(events)  # runs of one kind as one
    # weights, validation, then per step: rollout, sleep, train, wake, weights; validation at the end (a
    # validation and the next rollout both generate: one run of "generate")
    step = ["sleep", "train", "wake", "weights", "generate"]
    assert compacted == ["weights", "generate", *step, *step], events
    assert events.count("sleep") == events.count("wake") == 2
    assert asyncio.run(_unlocked(pipeline)) is True


async def _unlocked(pipeline: AgenticPipeline) -> bool:
    return not pipeline.parts.policy_server.policy.lock.locked()
