"""The KL to the policy the RL phase started from (`trainer.drift`): k1 / k3 on the first RL step's own
samples against hand-computed values, kept once, measured on demand, carried through a checkpoint (none after a
resume past the start from a checkpoint without them)."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from roll_pipeline.trainer.drift import StartDrift, kl_to_start


def test_kl_to_start_is_k1_and_k3_over_the_response_tokens():
    start = torch.tensor([[-1.0, -0.5, -2.0], [-0.1, -3.0, 0.0]])
    now = torch.tensor([[-1.5, -0.5, -1.0], [-0.3, 9.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])  # the 9.0 is off the response
    d = [0.5, 0.0, -1.0, 0.2]  # log pi_0 - log pi on the 4 response tokens
    got = kl_to_start(start, now, mask)
    assert got["signal/kl_to_start/k1"] == pytest.approx(sum(d) / 4)
    assert got["signal/kl_to_start/k3"] == pytest.approx(sum(math.exp(-x) + x - 1 for x in d) / 4)
    same = kl_to_start(start, start, mask)
    assert same == {"signal/kl_to_start/k1": 0.0, "signal/kl_to_start/k3": 0.0}


class _Trainer:
    """A train worker whose log-probs are whatever `now` holds, and which counts its calls."""

    def __init__(self, now: torch.Tensor) -> None:
        self.now, self.calls = now, 0

    async def map_rows(self, method: str, batch: dict, micro_batch_size: int) -> torch.Tensor:
        assert method == "compute_log_probs" and micro_batch_size == 4
        self.calls += 1
        return self.now.clone()


def test_the_first_rows_are_kept_and_scored_again_at_each_measure():
    trainer = _Trainer(torch.full((1, 2), -1.0))
    drift = StartDrift(trainer, 4)
    tensors, mask = {"input_ids": torch.ones(1, 2)}, torch.ones(1, 2, dtype=torch.bool)
    assert asyncio.run(drift.measure()) == {}  # nothing before the first RL step
    asyncio.run(drift.keep(tensors, mask, torch.full((1, 2), -1.0)))  # the trainer's own: no extra pass
    asyncio.run(drift.keep(tensors, mask, torch.full((1, 2), -9.0)))  # later steps are not the start
    assert trainer.calls == 0
    assert asyncio.run(drift.measure())["signal/kl_to_start/k1"] == 0.0
    trainer.now = torch.full((1, 2), -1.5)
    assert asyncio.run(drift.measure())["signal/kl_to_start/k1"] == pytest.approx(0.5)
    assert trainer.calls == 2


def test_the_samplers_log_probs_are_replaced_by_the_trainers_and_a_checkpoint_carries_the_start(tmp_path):
    trainer = _Trainer(torch.full((1, 2), -2.0))
    drift = StartDrift(trainer, 4)
    asyncio.run(drift.keep({"input_ids": torch.ones(1, 2)}, torch.ones(1, 2, dtype=torch.bool), None))
    assert trainer.calls == 1 and asyncio.run(drift.measure())["signal/kl_to_start/k1"] == 0.0
    drift.save(tmp_path / "drift.safetensors")
    trainer.now = torch.full((1, 2), -2.5)
    resumed = StartDrift(trainer, 4)
    resumed.resumed(tmp_path / "drift.safetensors", past_start=True)
    asyncio.run(resumed.keep({"input_ids": torch.ones(1, 2)}, torch.ones(1, 2, dtype=torch.bool), None))
    assert asyncio.run(resumed.measure())["signal/kl_to_start/k1"] == pytest.approx(0.5)  # against -2.0 kept
    without = StartDrift(trainer, 4)
    without.resumed(tmp_path / "absent.safetensors", past_start=True)
    asyncio.run(without.keep({"input_ids": torch.ones(1, 2)}, torch.ones(1, 2, dtype=torch.bool), None))
    assert asyncio.run(without.measure()) == {}
