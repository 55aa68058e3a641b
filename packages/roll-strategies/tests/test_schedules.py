from __future__ import annotations

import math

import pytest
from roll_strategies import HFTrainStrategy, OptimizerSettings, StrategyError, lr_decay_factor


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
def test_every_decay_starts_at_one(kind):
    assert lr_decay_factor(kind, 0.0, 0.1) == 1.0


def test_decay_values_against_closed_forms():
    # linear: 1 - 0.9 * p; cosine: 0.1 + 0.9 * (1 + cos(pi p)) / 2
    for p in (0.25, 0.5, 1.0):
        assert lr_decay_factor("linear", p, 0.1) == pytest.approx(1 - 0.9 * p)
        assert lr_decay_factor("cosine", p, 0.1) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * p)))
    assert lr_decay_factor("constant", 0.7) == 1.0
    assert lr_decay_factor("linear", 2.0) == 0.0  # progress is clamped to the run


def test_bad_decay_arguments_are_named():
    with pytest.raises(StrategyError, match="'constant', 'linear' or 'cosine'"):
        lr_decay_factor("step", 0.5)  # type: ignore[arg-type]
    with pytest.raises(StrategyError, match="min_ratio"):
        lr_decay_factor("linear", 0.5, 1.5)


def _nll(log_probs, entropy, mb):
    return -log_probs[:, 1:].mean(), {}


def test_lr_scale_applies_to_one_step_without_compounding(tiny_model_dir):
    import torch

    strategy = HFTrainStrategy(
        tiny_model_dir, optimizer=OptimizerSettings(learning_rate=1e-3, warmup_steps=4)
    )
    mb = [
        {"input_ids": torch.arange(8, 20).repeat(2, 1), "attention_mask": torch.ones(2, 12, dtype=torch.long)}
    ]
    lrs = [strategy.train_step(mb, _nll, with_entropy=False, lr_scale=s)["lr"] for s in (0.5, 1.0, 0.25, 3.0)]
    # warm-up gives 1/4, 2/4, 3/4, 4/4 of 1e-3; the scale multiplies only its own step (3: a phase's own rate)
    assert lrs == pytest.approx([0.125e-3, 0.5e-3, 0.1875e-3, 3e-3])
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(StrategyError, match="lr_scale"):
            strategy.train_step(mb, _nll, with_entropy=False, lr_scale=bad)


def test_adamw_with_warmup_and_lr_scale_on_a_bare_parameter():
    import torch
    from roll_strategies.train.schedules import adamw_with_warmup, apply_lr_scale

    weight = torch.nn.Parameter(torch.ones(3))
    optimizer, schedule = adamw_with_warmup(
        [weight],
        OptimizerSettings(learning_rate=2e-3, weight_decay=0.0, betas=(0.9, 0.98), eps=1e-8, warmup_steps=2),
    )
    lrs = []
    for scale in (1.0, 0.5, 0.5):
        weight.grad = torch.ones(3)
        lrs.append(apply_lr_scale(optimizer, scale))
        optimizer.step()
        schedule.step()
    # warm-up 1/2 then 2/2 of 2e-3, each times its own step's scale only
    assert lrs == pytest.approx([1e-3, 1e-3, 1e-3])
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.98)


def test_adamw_on_cpu_runs_fused_and_steps_as_the_per_tensor_loop():
    """The fused kernel `adamw_with_warmup` picks on the CPU makes torch's per-tensor AdamW's update (an
    independent implementation) to float rounding, warm-up and weight decay included."""
    import torch
    from roll_strategies.train.schedules import adamw_with_warmup

    settings = OptimizerSettings(learning_rate=3e-3, weight_decay=0.1, warmup_steps=2)
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(shape, generator=gen) for shape in ((7, 5), (5,), (3, 2, 4))]
    fused = [torch.nn.Parameter(w.clone()) for w in start]
    loop = [torch.nn.Parameter(w.clone()) for w in start]
    optimizer, schedule = adamw_with_warmup(fused, settings)
    reference = torch.optim.AdamW(loop, lr=3e-3, weight_decay=0.1, foreach=False)
    assert optimizer.defaults["fused"] is True
    for step in range(4):
        grads = [torch.randn(w.shape, generator=gen) for w in start]
        for p, q, g in zip(fused, loop, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        for group in reference.param_groups:
            group["lr"] = 3e-3 * min(1.0, (step + 1) / 2)
        optimizer.step()
        schedule.step()
        reference.step()
    for p, q, w in zip(fused, loop, start, strict=True):
        assert not torch.equal(p.detach(), w)  # the weights moved
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-6)


def test_adamw_falls_back_to_torch_default_off_cpu_and_cuda():
    import torch
    from roll_strategies.train.schedules import adamw_with_warmup

    optimizer, _ = adamw_with_warmup([torch.nn.Parameter(torch.ones(2, device="meta"))], OptimizerSettings())
    assert not optimizer.defaults["fused"]
