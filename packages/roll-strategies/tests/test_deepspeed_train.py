"""deepspeed_train on the CPU (gloo, one process) against hf_train as the independent reference."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from roll_strategies import (
    CheckpointError,
    HFInferStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    StrategyError,
    create_strategy,
    sync_weights,
)

pytestmark = [pytest.mark.deepspeed, pytest.mark.filterwarnings("ignore::FutureWarning")]

LR, WARMUP = 3e-3, 2
# micro-batches per step vary (3, 2, 1, 3) and carry loss_scale weights; the last step decays the lr
PLAN = [(3, 1.0), (2, 1.0), (1, 1.0), (3, 0.5)]


def _batch(seed: int, rows: int = 6, width: int = 12) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 200, (rows, width), generator=gen)
    mask = torch.ones_like(ids)
    mask[::2, -3:] = 0
    response = mask.bool()
    response[:, 0] = False  # a response token follows a real token: column 0 has no log-prob
    return {"input_ids": ids * mask, "attention_mask": mask, "response_mask": response}


def nll_loss(log_probs, entropy, mb):
    m = (mb["attention_mask"][:, 1:] * mb["attention_mask"][:, :-1]).float()
    loss = -(log_probs[:, 1:] * m).sum() / m.sum()
    return loss, {"entropy": float((entropy[:, 1:] * m).sum().detach() / m.sum())}


def _micro_batches(step: int, count: int) -> list[dict[str, torch.Tensor]]:
    weights = torch.arange(1, count + 1, dtype=torch.float32)
    weights = weights / weights.sum()
    return [{**_batch(100 * step + i), "loss_scale": weights[i]} for i in range(count)]


def _run(strategy, steps=PLAN) -> list[dict[str, float]]:
    return [
        strategy.train_step(_micro_batches(i, n), nll_loss, with_entropy=True, lr_scale=scale)
        for i, (n, scale) in enumerate(steps)
    ]


@pytest.fixture(scope="module")
def hf_reference(tiny_model_dir) -> tuple[list[dict[str, float]], torch.Tensor]:
    hf = HFTrainStrategy(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=LR, warmup_steps=WARMUP))
    return _run(hf), hf.compute_log_probs(_batch(999), 3)


def _deepspeed(model_dir: Path, config: dict, dtype: str = "float32"):
    return create_strategy(
        "deepspeed_train",
        "train",
        model_dir,
        strategy_config=config,
        dtype=dtype,
        optimizer=OptimizerSettings(learning_rate=LR, warmup_steps=WARMUP),
    )


@pytest.mark.parametrize(
    "zero",
    [
        {"stage": 0},
        {"stage": 1},
        {"stage": 2},
        {"stage": 3},
        {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    ],
    ids=["zero0", "zero1", "zero2", "zero3", "zero2-offload"],
)
def test_zero_stage_follows_the_hf_train_curve(tiny_model_dir, hf_reference, zero):
    reference, reference_lp = hf_reference
    ds = _deepspeed(tiny_model_dir, {"zero_optimization": zero})
    curve = _run(ds)
    for ours, theirs in zip(curve, reference, strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
        assert ours["entropy"] == pytest.approx(theirs["entropy"], rel=1e-5)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
        assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-9)
    assert [m["lr"] for m in curve] == pytest.approx([LR / 2, LR, LR, LR / 2])
    assert curve[-1]["loss"] < curve[0]["loss"] and ds.step == len(PLAN)
    torch.testing.assert_close(ds.compute_log_probs(_batch(999), 3), reference_lp, atol=2e-4, rtol=0)
    # weight sync out of (possibly partitioned) DeepSpeed weights, bucketed
    infer = HFInferStrategy(tiny_model_dir)
    metrics = sync_weights(ds, infer, version=4, dtype="float32", bucket_bytes=50_000)
    assert metrics["weight_sync/buckets"] > 10
    torch.testing.assert_close(
        infer.compute_log_probs(_batch(999), 3), ds.compute_log_probs(_batch(999), 3), atol=1e-5, rtol=0
    )


def test_bf16_follows_the_fp32_curve_loosely(tiny_model_dir, hf_reference):
    ds = _deepspeed(
        tiny_model_dir, {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}, "bfloat16"
    )
    assert next(ds.model.parameters()).dtype == torch.bfloat16
    curve = _run(ds)
    for ours, theirs in zip(curve, hf_reference[0], strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=5e-3)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=2e-2)


@pytest.mark.parametrize("stage", [1, 3])
def test_checkpoint_resume_continues_identically(tiny_model_dir, tmp_path, stage):
    config = {"zero_optimization": {"stage": stage}}
    first = _deepspeed(tiny_model_dir, config)
    _run(first, PLAN[:2])
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = _deepspeed(tiny_model_dir, config)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.step == 2 and resumed.weights_fingerprint() != first.weights_fingerprint()
    rest = PLAN[2:]
    assert _run(resumed, rest) == _run(first, rest)  # warm-up position, Adam moments and weights all restored
    for a, b in zip(first.export_weights().values(), resumed.export_weights().values(), strict=True):
        assert (a == b).all()
    # the checkpoint is also a plain Hugging Face model folder (as of step 2)
    hf = HFInferStrategy(tmp_path / "ckpt")
    again = _deepspeed(tiny_model_dir, config)
    again.load_checkpoint(tmp_path / "ckpt")
    torch.testing.assert_close(
        hf.compute_log_probs(_batch(5), 3), again.compute_log_probs(_batch(5), 3), atol=1e-5, rtol=0
    )


def test_errors_are_clear(tiny_model_dir, tmp_path):
    with pytest.raises(StrategyError, match="hf_train or hf_infer"):
        create_strategy("deepspeed_train", "train", tiny_model_dir, trainable=False)
    ds = _deepspeed(tiny_model_dir, {"zero_optimization": {"stage": 0}})
    with pytest.raises(CheckpointError, match=r"DeepSpeedTrainStrategy\.save_checkpoint"):
        ds.load_checkpoint(tmp_path)
    with pytest.raises(StrategyError, match="finite lr_scale >= 0"):
        ds.train_step(_micro_batches(0, 1), nll_loss, with_entropy=True, lr_scale=-1.0)


def _nan_when_poisoned(log_probs, entropy, mb):
    loss, metrics = nll_loss(log_probs, entropy, mb)
    return (loss * math.nan if "poison" in mb else loss), metrics


@pytest.mark.parametrize(
    ("zero", "dtype"),
    [
        ({"stage": 0}, "float32"),
        ({"stage": 2}, "float32"),
        ({"stage": 3}, "float32"),
        ({"stage": 2}, "bfloat16"),
    ],
    ids=["zero0-plain-adamw", "zero2", "zero3", "zero2-bf16"],
)
def test_a_nan_loss_skips_the_step_and_the_run_goes_on_as_hf_train(tiny_model_dir, zero, dtype):
    ds = _deepspeed(tiny_model_dir, {"zero_optimization": zero}, dtype)
    reference = HFTrainStrategy(
        tiny_model_dir, optimizer=OptimizerSettings(learning_rate=LR, warmup_steps=WARMUP), dtype=dtype
    )
    for strategy in (ds, reference):
        strategy.train_step(_micro_batches(0, 3), nll_loss, with_entropy=True)
    weights, fingerprint = ds.export_weights(), ds.weights_fingerprint()
    poisoned = _micro_batches(1, 3)
    poisoned[1]["poison"] = torch.tensor(True)  # micro-batch 0 already back-propagated into ZeRO's buffers
    out = ds.train_step(poisoned, _nan_when_poisoned, with_entropy=True, lr_scale=0.5)
    assert math.isnan(out["loss"]) and math.isnan(out["grad_norm"]) and out["lr"] == pytest.approx(LR / 2)
    assert out["nonfinite_steps"] == 1 and out["nonfinite_in_a_row"] == 1 and ds.step == 2
    assert ds.weights_fingerprint() == fingerprint
    assert all((a == b).all() for a, b in zip(weights.values(), ds.export_weights().values(), strict=True))
    # then it continues as hf_train without the skipped step: no leak of micro-batch 0's gradients, the
    # skipped step's lr scale not carried over
    for i, (count, scale) in enumerate(PLAN[2:]):
        ours = ds.train_step(_micro_batches(i + 2, count), nll_loss, with_entropy=True, lr_scale=scale)
        theirs = reference.train_step(
            _micro_batches(i + 2, count), nll_loss, with_entropy=True, lr_scale=scale
        )
        tolerance = 1e-4 if dtype == "float32" else 2e-2
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=tolerance)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=tolerance)
        assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-9)
        assert ours["nonfinite_steps"] == 1 and ours["nonfinite_in_a_row"] == 0
