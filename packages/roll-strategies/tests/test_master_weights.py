"""Mixed precision and non-finite steps of the HF train strategies (`master_weights.MasterWeightOptimizer`).

References are written here without the code under test: a float32 run of the same steps, a plain bf16
AdamW (the path before master weights, which loses small updates), a hand-written master-weight loop,
plain fp16 autograd (whose gradients underflow), and a run that never saw the skipped step.
"""

from __future__ import annotations

import math

import pytest
import torch
from roll_strategies import (
    HFCriticStrategy,
    HFInferStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    sync_weights,
    token_log_probs,
)
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def _batch(seed: int, rows: int = 8, width: int = 12) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 200, (rows, width), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def nll(log_probs, entropy, mb):
    loss = -log_probs[:, 1:].mean()
    return loss, {"nll": float(loss.detach())}


def scaled_nll(factor: float):
    def loss_fn(log_probs, entropy, mb):
        return -log_probs[:, 1:].mean() * factor, {}

    return loss_fn


def _masters(strategy: HFTrainStrategy) -> dict[str, torch.Tensor]:
    """The weights as trained, float32, copied."""
    return {n: t.detach().float().clone() for n, t in strategy._named_weights().items()}


def _flat(named: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for _, t in sorted(named.items())])


def _deltas(dtype: str, model_dir, steps: int = 3, lr: float = 1e-6) -> torch.Tensor:
    strategy = HFTrainStrategy(model_dir, dtype=dtype, optimizer=OptimizerSettings(learning_rate=lr))
    before = _flat(_masters(strategy))
    for seed in range(steps):
        strategy.train_step([_batch(seed)], nll, with_entropy=False)
    return _flat(_masters(strategy)) - before


def _plain_bf16_adamw_deltas(model_dir, steps: int = 3, lr: float = 1e-6) -> torch.Tensor:
    """The old path: AdamW straight on the bf16 parameters (its moments bf16 too)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    before = _flat({n: p.detach().float().clone() for n, p in model.named_parameters()})
    for seed in range(steps):
        optimizer.zero_grad()
        mb = _batch(seed)
        log_probs, _ = token_log_probs(model, mb["input_ids"], mb["attention_mask"], with_entropy=False)
        (-log_probs[:, 1:].mean()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return _flat({n: p.detach().float() for n, p in model.named_parameters()}) - before


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def test_bf16_masters_move_like_fp32_where_plain_bf16_adamw_does_not(tiny_model_dir):
    # lr 1e-6 on weights of ~1e-2: each update is ~100x below bf16's resolution at that size
    fp32 = _deltas("float32", tiny_model_dir)
    bf16 = _deltas("bfloat16", tiny_model_dir)
    plain = _plain_bf16_adamw_deltas(tiny_model_dir)
    ratio = float(bf16.norm() / fp32.norm())
    assert abs(ratio - 1.0) <= 1e-2 and _cosine(bf16, fp32) >= 0.99, (ratio, _cosine(bf16, fp32))
    # Elementwise the bf16 forward/backward flips the sign of the tiniest gradients, which Adam turns into
    # full-size steps: about 0.3% of the elements, so the deltas differ by ~5% in L2, not more.
    assert float((bf16 - fp32).norm() / fp32.norm()) <= 0.1
    # the old path loses most of the update: the test can fail
    assert float(plain.norm() / fp32.norm()) <= 0.5
    assert float((plain != 0).float().mean()) <= 0.05
    assert float((bf16 != 0).float().mean()) >= 0.95


def test_bf16_step_is_adamw_on_float32_masters_fed_the_upcast_gradients(tiny_model_dir):
    """A hand-written master-weight loop (bf16 model, fp32 copies, fp32 AdamW, clip, copy back) as reference."""
    strategy = HFTrainStrategy(
        tiny_model_dir, dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-3, max_grad_norm=0.5)
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    params = list(model.parameters())
    masters = [p.detach().float() for p in params]
    # the kernel adamw_with_warmup picks (test_schedules checks it against the per-tensor loop): bit-equal weights
    optimizer = torch.optim.AdamW(masters, lr=1e-3, weight_decay=0.0, fused=True)
    mbs = [_batch(0, rows=4), _batch(1, rows=4)]
    for _ in range(3):
        for mb in mbs:
            log_probs, _ = token_log_probs(model, mb["input_ids"], mb["attention_mask"], with_entropy=False)
            (-log_probs[:, 1:].mean() * 0.5).backward()
            for p, m in zip(params, masters, strict=True):  # float32 accumulation over micro-batches
                m.grad = p.grad.float() if m.grad is None else m.grad + p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(masters, 0.5)
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for p, m in zip(params, masters, strict=True):
                p.copy_(m)
        ours = strategy.train_step(mbs, scaled_nll(1.0), with_entropy=False)
        assert math.isfinite(ours["grad_norm"]) and ours["nonfinite_steps"] == 0
    for (name, _), mine, theirs in zip(
        model.named_parameters(), strategy.trainer.masters, masters, strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-7, msg=name)
        assert mine.dtype == torch.float32
    for a, b in zip(strategy.model.parameters(), params, strict=True):
        assert torch.equal(a, b)  # the bf16 model is its masters rounded


def test_float32_parameters_are_their_own_masters(tiny_model_dir):
    strategy = HFTrainStrategy(tiny_model_dir)
    trainer = strategy.trainer
    assert trainer is not None and not trainer.has_copies and trainer.scaler is None
    assert all(m is p for m, p in zip(trainer.masters, strategy.model.parameters(), strict=True))
    bf16 = HFTrainStrategy(tiny_model_dir, dtype="bfloat16").trainer
    assert bf16 is not None and bf16.has_copies and bf16.scaler is None
    assert {m.dtype for m in bf16.masters} == {torch.float32}


def test_fp16_loss_scaling_keeps_gradients_that_underflow_without_it(tiny_model_dir):
    tiny_loss = scaled_nll(1e-6)
    mb = _batch(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float16)
    log_probs, _ = token_log_probs(model, mb["input_ids"], mb["attention_mask"], with_entropy=False)
    tiny_loss(log_probs, None, mb)[0].backward()
    assert all(not p.grad.any() for p in model.parameters() if p.grad is not None)  # all underflowed
    reference = HFTrainStrategy(tiny_model_dir)  # the same gradient in float32
    expected = reference.train_step([mb], tiny_loss, with_entropy=False)["grad_norm"]
    strategy = HFTrainStrategy(
        tiny_model_dir, dtype="float16", optimizer=OptimizerSettings(learning_rate=1e-3)
    )
    before = _flat(_masters(strategy))
    out = strategy.train_step([mb], tiny_loss, with_entropy=False)
    assert out["grad_scale"] == 2.0**16 and out["overflow_steps"] == 0 and out["nonfinite_steps"] == 0
    assert out["grad_norm"] == pytest.approx(expected, rel=2e-2)
    assert float((_flat(_masters(strategy)) != before).float().mean()) > 0.9


def test_fp16_overflow_skips_the_step_and_halves_the_scale(tiny_model_dir):
    strategy = HFTrainStrategy(
        tiny_model_dir, dtype="float16", optimizer=OptimizerSettings(learning_rate=1e-3)
    )
    trainer = strategy.trainer
    assert trainer is not None and trainer.scaler is not None
    huge = scaled_nll(1e3)  # gradients ~1e1 at the logits: times 2^16 they overflow float16 (max 65504)
    before, state = _masters(strategy), trainer.optimizer.state_dict()
    scales, applied = [], False
    fingerprint = strategy.weights_fingerprint()
    for _ in range(16):
        out = strategy.train_step([_batch(0)], huge, with_entropy=False)
        scales.append(out["grad_scale"])
        if math.isfinite(out["grad_norm"]):
            applied = True
            break
        assert out["nonfinite_steps"] == 0 and out["nonfinite_in_a_row"] == 0  # the scale's fault
        assert strategy.weights_fingerprint() == fingerprint
        assert all(torch.equal(before[n], t) for n, t in _masters(strategy).items())
        assert trainer.optimizer.state_dict()["state"] == state["state"] and trainer.scheduler.last_epoch == 0
    assert applied and len(scales) >= 2, scales
    assert scales == [2.0**16 / 2**i for i in range(len(scales))]
    assert out["overflow_steps"] == len(scales) - 1 and trainer.scaler.scale == scales[-1]
    assert trainer.scheduler.last_epoch == 1 and strategy.step == len(scales)


def _nan_on_second_micro_batch(log_probs, entropy, mb):
    loss = -log_probs[:, 1:].mean()
    if bool(mb.get("poison", torch.tensor(False))):
        loss = loss * math.nan
    return loss, {"nll": float(loss.detach())}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_nan_loss_skips_the_step_and_touches_nothing(tiny_model_dir, dtype):
    good = [{**_batch(0, rows=4), "loss_scale": 0.5}, {**_batch(1, rows=4), "loss_scale": 0.5}]
    bad = [good[0], {**good[1], "poison": torch.tensor(True)}]  # the first micro-batch back-propagates
    strategy = HFTrainStrategy(
        tiny_model_dir, dtype=dtype, optimizer=OptimizerSettings(learning_rate=1e-3, warmup_steps=3)
    )
    untouched = HFTrainStrategy(
        tiny_model_dir, dtype=dtype, optimizer=OptimizerSettings(learning_rate=1e-3, warmup_steps=3)
    )
    assert strategy.trainer is not None
    first = strategy.train_step(good, _nan_on_second_micro_batch, with_entropy=False, lr_scale=0.5)
    untouched.train_step(good, _nan_on_second_micro_batch, with_entropy=False, lr_scale=0.5)
    weights, state = _masters(strategy), strategy.trainer.state_dict()
    fingerprint = strategy.weights_fingerprint()
    skipped = strategy.train_step(bad, _nan_on_second_micro_batch, with_entropy=False, lr_scale=0.5)
    assert math.isnan(skipped["loss"]) and math.isnan(skipped["nll"]) and math.isnan(skipped["grad_norm"])
    assert skipped["nonfinite_steps"] == 1 and skipped["nonfinite_in_a_row"] == 1
    assert skipped["lr"] == first["lr"] * 2  # warm-up 2/3 would come next, but did not advance: still 1/3
    assert all(torch.equal(weights[n], t) for n, t in _masters(strategy).items())
    after = strategy.trainer.state_dict()
    assert after["scheduler"] == state["scheduler"]
    for key, moments in state["optimizer"]["state"].items():
        assert all(torch.equal(v, after["optimizer"]["state"][key][k]) for k, v in moments.items())
    assert strategy.weights_fingerprint() == fingerprint  # nothing to sync
    assert strategy.step == 2 and all(p.grad is None for p in strategy.model.parameters())
    # the next step is exactly the one a run that never saw the NaN takes
    ours = strategy.train_step(good, _nan_on_second_micro_batch, with_entropy=False)
    theirs = untouched.train_step(good, _nan_on_second_micro_batch, with_entropy=False)
    assert ours["nonfinite_steps"] == 1 and ours["nonfinite_in_a_row"] == 0
    assert {k: v for k, v in ours.items() if not k.startswith("nonfinite")} == {
        k: v for k, v in theirs.items() if not k.startswith("nonfinite")
    }
    assert all(
        torch.equal(a, b)
        for a, b in zip(_masters(strategy).values(), _masters(untouched).values(), strict=True)
    )


def test_a_nan_gradient_with_a_finite_loss_is_skipped(tiny_model_dir):
    def nan_grad(log_probs, entropy, mb):
        # sqrt at 0: finite value, infinite slope; times a zero inner slope the gradient is NaN
        return -log_probs[:, 1:].mean() + (log_probs.sum() * 0.0).sqrt(), {}

    strategy = HFTrainStrategy(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=1e-3))
    before = _masters(strategy)
    out = strategy.train_step([_batch(0)], nan_grad, with_entropy=False)
    assert math.isfinite(out["loss"]) and math.isnan(out["grad_norm"])
    assert out["nonfinite_steps"] == 1 and strategy.trainer.scheduler.last_epoch == 0
    assert all(torch.equal(before[n], t) for n, t in _masters(strategy).items())


def test_bf16_checkpoint_restores_the_float32_masters_exactly(tiny_model_dir, tmp_path):
    def run(strategy, poison: bool = False):
        mb = {**_batch(3), "poison": torch.tensor(poison)}
        return strategy.train_step([mb], _nan_on_second_micro_batch, with_entropy=False)

    a = HFTrainStrategy(
        tiny_model_dir, dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-5, warmup_steps=4)
    )
    run(a), run(a, poison=True), run(a)
    a.save_checkpoint(tmp_path / "ckpt")
    saved = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}
    assert all(torch.equal(saved[n], t) for n, t in _masters(a).items() if n in saved)
    b = HFTrainStrategy(
        tiny_model_dir, dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-5, warmup_steps=4)
    )
    b.load_checkpoint(tmp_path / "ckpt")
    assert b.step == 3 and b.trainer.nonfinite.total == 1 and b.trainer.scheduler.last_epoch == 2
    assert all(torch.equal(x, y) for x, y in zip(_masters(a).values(), _masters(b).values(), strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))
    # the folder loads as a plain bf16 model: the masters rounded, i.e. the trained model's weights
    infer = HFInferStrategy(tmp_path / "ckpt", dtype="bfloat16")
    assert all(torch.equal(x, y) for x, y in zip(infer.model.parameters(), b.model.parameters(), strict=True))
    assert run(a) == run(b)


def test_bf16_export_and_sync_send_the_masters(tiny_model_dir):
    train = HFTrainStrategy(tiny_model_dir, dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-6))
    for seed in range(2):
        train.train_step([_batch(seed)], nll, with_entropy=False)
    masters = _masters(train)
    exported = train.export_weights()
    assert exported.keys() == masters.keys()
    assert all(torch.equal(torch.from_numpy(exported[n]), t) for n, t in masters.items())
    # lr 1e-6 moved the masters, not (all of) the rounded model: the export is the masters, not the model
    assert any(
        not torch.equal(p.float(), masters[n]) for n, p in train.model.named_parameters() if n in masters
    )
    fp32_infer, bf16_infer = (
        HFInferStrategy(tiny_model_dir),
        HFInferStrategy(tiny_model_dir, dtype="bfloat16"),
    )
    sync_weights(train, fp32_infer, version=1, dtype="float32", bucket_bytes=40_000)
    sync_weights(train, bf16_infer, version=1, dtype="bfloat16", bucket_bytes=40_000)
    for name, received in fp32_infer.model.named_parameters():
        if name in masters:
            assert torch.equal(received, masters[name]), name
    # in bf16 the inference model is the train model exactly (both the masters rounded to nearest)
    for (name, received), trained in zip(
        bf16_infer.model.named_parameters(), train.model.parameters(), strict=True
    ):
        assert torch.equal(received, trained), name


def _values_mse(values, mb):
    mask = mb["response_mask"].float()
    loss = (((values - 1.0) ** 2) * mask).sum() / mask.sum()
    if bool(mb.get("poison", torch.tensor(False))):
        loss = loss * math.inf
    return loss, {}


def test_critic_shares_the_step_bf16_masters_and_nan_skips(tiny_model_dir, tmp_path):
    response = torch.ones(8, 12, dtype=torch.bool)
    response[:, 0] = False  # a value follows a real token
    mb = {**_batch(5), "response_mask": response}
    critic = HFCriticStrategy(
        tiny_model_dir, dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-6)
    )
    assert critic.trainer.has_copies
    head = critic.trainer.masters[-1].clone()
    critic.train_step([mb], _values_mse)
    assert not torch.equal(head, critic.trainer.masters[-1])
    moved = [m.clone() for m in critic.trainer.masters]
    out = critic.train_step([{**mb, "poison": torch.tensor(True)}], _values_mse)
    assert math.isinf(out["loss"]) and out["nonfinite_steps"] == 1 and critic.step == 2
    assert all(torch.equal(a, b) for a, b in zip(moved, critic.trainer.masters, strict=True))
    critic.save_checkpoint(tmp_path / "critic")
    again = HFCriticStrategy(
        tmp_path / "critic", dtype="bfloat16", optimizer=OptimizerSettings(learning_rate=1e-6)
    )
    again.load_checkpoint(tmp_path / "critic")
    assert again.trainer.nonfinite.total == 1
    assert all(torch.equal(a, b) for a, b in zip(moved, again.trainer.masters, strict=True))


@pytest.mark.parametrize("shape", [(3, 5), (1000, 2100), (2100, 1000)])
def test_folding_a_bf16_gradient_in_chunks_equals_adding_its_upcast(shape):
    """The chunked fold (tensors over FOLD_CHUNK elements) against master + grad.float(), element for element,
    over three micro-batches; and a non-contiguous gradient takes the plain path."""
    from roll_strategies.train.master_weights import FOLD_CHUNK, fold_gradient

    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(shape, generator=gen).to(torch.bfloat16) for _ in range(3)]
    master, reference = grads[0].float(), grads[0].float()
    for grad in grads[1:]:
        fold_gradient(master, grad)
        reference = reference + grad.float()
    assert torch.equal(master, reference)
    assert (math.prod(shape) > FOLD_CHUNK) == (shape != (3, 5))
    transposed = grads[1].t()
    folded = grads[0].float().t().contiguous()
    fold_gradient(folded, transposed)
    assert torch.equal(folded, grads[0].float().t() + transposed.float())
