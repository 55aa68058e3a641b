"""Padded and packed forwards on the real tiny model: same log-probs, entropy, exact KL and gradients.

The padded path is checked against `token_log_probs` (the independent reference already used for the
old / reference log-probs), the packed path against the padded one, and the exact KL against a direct
sum over the vocabulary of two models' softmaxes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from roll_strategies import HFTrainStrategy, lm_outputs, packing_supported, token_log_probs
from roll_strategies.forward import PACK_CAPACITY_KEY, REF_FULL_KEY, full_log_probs


def rl_rows(seed: int = 0, left_pad: bool = False) -> dict[str, torch.Tensor]:
    """Rows of prompt + response of mixed lengths (right padding, or left padding)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [(7, 3), (12, 5), (4, 2), (20, 4), (9, 1), (15, 6)]
    width = max(p + q for p, q in lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    resp = torch.zeros_like(ids, dtype=torch.bool)
    for r, (p, q) in enumerate(lengths):
        start = width - p - q if left_pad else 0
        ids[r, start : start + p + q] = torch.randint(8, 200, (p + q,), generator=gen)
        mask[r, start : start + p + q] = 1
        resp[r, start + p : start + p + q] = True
    return {"input_ids": ids, "attention_mask": mask, "response_mask": resp}


@pytest.fixture(scope="module")
def model(warm_model_dir):
    return HFTrainStrategy(warm_model_dir, trainable=False).model


@pytest.mark.parametrize("left_pad", [False, True])
def test_padded_path_equals_token_log_probs(model, left_pad):
    b = rl_rows(1, left_pad)
    with torch.no_grad():
        ref, ref_ent = token_log_probs(model, b["input_ids"], b["attention_mask"], with_entropy=True)
        out = lm_outputs(model, b["input_ids"], b["attention_mask"], b["response_mask"], with_entropy=True)
    m = b["response_mask"]
    torch.testing.assert_close(out.log_probs[m], ref[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref_ent[m], rtol=0, atol=1e-5)
    assert bool((out.log_probs[~m] == 0).all())


@pytest.mark.parametrize("capacity", [20, 32, 64])
def test_packed_path_equals_padded(model, capacity):
    b = rl_rows(2)
    with torch.no_grad():
        padded = lm_outputs(model, b["input_ids"], b["attention_mask"], b["response_mask"], with_entropy=True)
        packed = lm_outputs(
            model,
            b["input_ids"],
            b["attention_mask"],
            b["response_mask"],
            with_entropy=True,
            pack_capacity=capacity,
        )
    torch.testing.assert_close(packed.log_probs, padded.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed.entropy, padded.entropy, rtol=0, atol=1e-5)


def test_packed_gradients_equal_padded_gradients(warm_model_dir):
    """The done-when check at the forward level: d(loss)/d(every parameter) equal within float tolerance."""
    b = rl_rows(3)
    weights = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(0))

    def grads(pack_capacity):
        model = HFTrainStrategy(warm_model_dir, trainable=False).model.requires_grad_(True)
        out = lm_outputs(
            model,
            b["input_ids"],
            b["attention_mask"],
            b["response_mask"],
            with_entropy=True,
            pack_capacity=pack_capacity,
        )
        loss = (out.log_probs * weights).sum() - 0.1 * out.entropy.sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    padded, packed = grads(None), grads(32)
    assert padded.keys() == packed.keys()
    for name in padded:
        torch.testing.assert_close(packed[name], padded[name], rtol=1e-4, atol=1e-6, msg=name)
    assert max(float(g.abs().max()) for g in padded.values()) > 1e-3  # the gradients are not all zero


def test_full_kl_is_the_exact_sum_over_the_vocabulary(model):
    ref_model = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    b = rl_rows(4)
    ref_full = full_log_probs(ref_model, b, micro_batch_size=4, device="cpu")
    m = b["response_mask"]
    assert ref_full.shape == (int(m.sum()), model.config.vocab_size)
    with torch.no_grad():
        out = lm_outputs(model, b["input_ids"], b["attention_mask"], m, ref_full_log_probs=ref_full)
        got, got_forward = out.full_kl, out.full_kl_forward
        packed = lm_outputs(
            model, b["input_ids"], b["attention_mask"], m, ref_full_log_probs=ref_full, pack_capacity=40
        ).full_kl
        # independent: full logits of both models, shifted by one, summed over the vocabulary by hand
        logp = torch.log_softmax(
            model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
        logq = torch.log_softmax(
            ref_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
    rows, cols = m.nonzero(as_tuple=True)
    want, want_forward = torch.zeros(m.shape), torch.zeros(m.shape)
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        p, q = logp[r, c - 1], logq[r, c - 1]
        want[r, c] = float((p.exp() * (p - q)).sum())
        want_forward[r, c] = float((q.exp() * (q - p)).sum())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_forward, want_forward, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(packed, want, rtol=1e-4, atol=1e-5)
    assert float(got[m].min()) >= 0 and float(got[m].mean()) > 1e-4


class _NoPositions(torch.nn.Module):
    """A causal LM that ignores position ids: packed sequences would attend across each other."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)


def test_packing_support_is_probed_not_assumed(model):
    assert packing_supported(model)
    assert not packing_supported(_NoPositions(copy.deepcopy(model)))


def test_train_step_packed_equals_padded(warm_model_dir):
    """Same micro-batches, packed or not: the same loss and the same gradient norm in `train_step`."""
    b = rl_rows(5)
    adv = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(1))

    def loss_fn(log_probs, entropy, mb):
        m = mb["response_mask"]
        loss = -(log_probs * mb["adv"])[m].mean() + 0.01 * mb["full_kl"][m].mean()
        return loss, {"kl": float(mb["full_kl"][m].mean().detach())}

    ref_full = full_log_probs(HFTrainStrategy(warm_model_dir, trainable=False).model, b, 8, device="cpu")
    results = []
    for capacity in (None, 24):
        strategy = HFTrainStrategy(warm_model_dir, learning_rate=1e-3)
        mb = {**b, "adv": adv, REF_FULL_KEY: ref_full}
        if capacity is not None:
            mb[PACK_CAPACITY_KEY] = capacity
        results.append(strategy.train_step([mb], loss_fn, with_entropy=False))
    padded, packed = results
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5, abs=1e-6)
    assert packed["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-4)
    assert padded["kl"] == pytest.approx(0.0, abs=1e-6)  # the model against its own initial weights
