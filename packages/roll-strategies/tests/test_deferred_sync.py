"""hf_train without host syncs between micro-batches (`defer_sync`, the CUDA default) against the CPU default
that reads each loss before its backward: the same metrics and bit-identical weights after finite steps, and
the same skipped step, untouched weights and counters when a micro-batch's loss is NaN."""

from __future__ import annotations

import math

import pytest
import torch
from roll_strategies import HFTrainStrategy, OptimizerSettings
from roll_strategies.train.train_loop import StepSums


def _micro_batches(seed: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for share in (0.25, 0.75):  # unequal shares, as token-budget micro-batches get
        ids = torch.randint(8, 200, (3, 10), generator=gen)
        rows.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_scale": share})
    return rows


def _nll(log_probs, entropy, mb):
    loss = -log_probs[:, 1:].mean()
    if "poison" in mb:
        loss = loss * float("nan")
    return loss, {"nll": loss.detach(), "rows": float(mb["input_ids"].shape[0])}  # a tensor and a float


def _weights(strategy: HFTrainStrategy) -> list[torch.Tensor]:
    return [t.detach().float().clone() for _, t in sorted(strategy._named_weights().items())]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deferred_sync_takes_the_steps_of_the_per_micro_batch_loop(tiny_model_dir, dtype):
    settings = OptimizerSettings(learning_rate=1e-3, warmup_steps=2)
    eager = HFTrainStrategy(tiny_model_dir, dtype=dtype, optimizer=settings)
    deferred = HFTrainStrategy(tiny_model_dir, dtype=dtype, optimizer=settings, defer_sync=True)
    assert not eager.defer_sync  # on the CPU the default reads each loss at once
    for seed in range(2):
        ours = deferred.train_step(_micro_batches(seed), _nll, with_entropy=False)
        theirs = eager.train_step(_micro_batches(seed), _nll, with_entropy=False)
        assert ours == theirs and ours["nll"] == ours["loss"] and ours["rows"] == 3.0
        assert all(torch.equal(a, b) for a, b in zip(_weights(deferred), _weights(eager), strict=True))
    before = _weights(deferred)
    poisoned = _micro_batches(5)
    poisoned[0]["poison"] = torch.tensor(True)  # the first micro-batch: the eager loop stops there
    ours = deferred.train_step(poisoned, _nll, with_entropy=False)
    theirs = eager.train_step(poisoned, _nll, with_entropy=False)
    assert math.isnan(ours["loss"]) and math.isnan(theirs["loss"]) and math.isnan(ours["grad_norm"])
    assert ours["nonfinite_steps"] == theirs["nonfinite_steps"] == 1 and ours["lr"] == theirs["lr"]
    assert all(torch.equal(a, b) for a, b in zip(_weights(deferred), before, strict=True))
    assert all(p.grad is None for p in deferred.model.parameters())


def test_resolve_reads_every_kept_value_in_order():
    sums = StepSums()
    sums.add_later(0.5, torch.tensor(2.0), {"a": torch.tensor(4.0), "b": 1.0})
    sums.add_later(0.5, torch.tensor(float("inf")), {"a": torch.tensor(6.0, dtype=torch.bfloat16), "b": 3.0})
    sums.resolve()
    assert sums.means()["a"] == 5.0 and sums.means()["b"] == 2.0 and sums.nonfinite_loss
    assert sums.micro_batches == 2 and sums.pending == []
