"""KL estimators against loop references and the exact KL; controllers; KL-as-reward."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import AdaptiveKLController, AlgosError, FixedKLController, apply_kl_penalty, kl_penalty


def ref_kl(lp: float, ref: float, kind: str) -> float:
    x = lp - ref
    return {
        "kl": x,
        "abs": abs(x),
        "mse": 0.5 * x * x,
        "k3": min(max(math.exp(-x) + x - 1, -10.0), 10.0),
    }[kind]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["kl", "abs", "mse", "k3"]))
def test_estimators_match_reference(seed, kind):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    ref = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    out = kl_penalty(lp, ref, kind)
    for r in range(3):
        for c in range(5):
            assert float(out[r, c]) == pytest.approx(ref_kl(float(lp[r, c]), float(ref[r, c]), kind))


def test_full_kl_matches_loop_and_estimators_are_unbiased_for_it():
    torch.manual_seed(0)
    logits, ref_logits = torch.randn(1, 1, 6, dtype=torch.float64), torch.randn(1, 1, 6, dtype=torch.float64)
    full = float(kl_penalty(None, None, "full", logits=logits, ref_logits=ref_logits))
    p = torch.softmax(logits[0, 0], -1).tolist()
    q = torch.softmax(ref_logits[0, 0], -1).tolist()
    assert full == pytest.approx(sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True)))
    # k1 and k3 are unbiased: their expectation under pi (exactly, summing over the vocabulary) is the KL
    lp, lq = torch.log(torch.tensor(p)), torch.log(torch.tensor(q))
    for kind in ("kl", "k3"):
        expectation = float((torch.tensor(p) * kl_penalty(lp, lq, kind)).sum())
        assert expectation == pytest.approx(full, rel=1e-6)


def test_full_forward_matches_loop_and_its_gradient_is_pi_minus_ref():
    torch.manual_seed(1)
    logits = torch.randn(1, 1, 5, dtype=torch.float64, requires_grad=True)
    ref_logits = torch.randn(1, 1, 5, dtype=torch.float64)
    forward = kl_penalty(None, None, "full_forward", logits=logits, ref_logits=ref_logits)
    p = torch.softmax(logits[0, 0].detach(), -1).tolist()
    q = torch.softmax(ref_logits[0, 0], -1).tolist()
    assert float(forward) == pytest.approx(sum(qi * math.log(qi / pi) for pi, qi in zip(p, q, strict=True)))
    forward.sum().backward()
    # d KL(ref || pi) / d logit_v = pi(v) - ref(v): no factor pi(v) that would vanish for a given-up token
    want = [pi - qi for pi, qi in zip(p, q, strict=True)]
    assert logits.grad[0, 0].tolist() == pytest.approx(want, rel=1e-5)  # float32 inside


def test_k3s_expected_gradient_is_the_forward_kls_until_the_clamp():
    # as a loss on tokens drawn from pi, k3's gradient is sum_v (pi - ref) grad log pi: KL(ref || pi)'s,
    # while the clamp at 10 drops the tokens with ref / pi > ~11.5 (the ones the policy has given up)
    def expected_k3_grad(logits, ref):
        z = logits.clone().requires_grad_(True)
        lp = torch.log_softmax(z, -1)
        weights = torch.softmax(logits, -1)  # the sampling distribution, not differentiated
        (weights * kl_penalty(lp, ref, "k3")).sum().backward()
        return z.grad

    ref = torch.log(torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64))
    mild = torch.tensor([1.0, 0.0, 0.5, -0.5], dtype=torch.float64)
    assert expected_k3_grad(mild, ref).tolist() == pytest.approx(
        (torch.softmax(mild, -1) - ref.exp()).tolist(), rel=1e-9
    )
    given_up = torch.tensor([6.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # pi ~ 0.0025 for three moves
    k3_pull = -expected_k3_grad(given_up, ref)[1:]  # only through the kept move's softmax: ~pi(v)
    forward_pull = (ref.exp() - torch.softmax(given_up, -1))[1:]
    assert float(k3_pull.max()) < 0.002 and float(forward_pull.min()) > 0.24


def test_full_needs_logits_and_unknown_kind():
    with pytest.raises(AlgosError, match="logits and ref_logits"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "full")
    with pytest.raises(AlgosError, match="k3"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_k3_gradient_is_finite_for_large_log_ratio():
    lp = torch.tensor([[30.0, -30.0]], requires_grad=True)
    kl_penalty(lp, torch.zeros(1, 2)).sum().backward()
    assert torch.isfinite(lp.grad).all()


def test_apply_kl_penalty():
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    lp, ref = torch.tensor([[0.0, -1.0, -2.0]]), torch.tensor([[-0.5, -1.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    out, mean_kl = apply_kl_penalty(rewards, lp, ref, mask, coef=0.1, kind="kl")
    assert torch.allclose(out, torch.tensor([[-0.05, 1.0, 0.0]]))
    assert float(mean_kl) == pytest.approx(0.25)


def test_controllers():
    fixed = FixedKLController(0.1)
    assert fixed.update(5.0, 10) == 0.1
    ctl = AdaptiveKLController(value=0.1, target=0.05, horizon=100)
    # KL twice the target: error clipped to 0.2 -> beta * (1 + 0.2 * 10 / 100)
    assert ctl.update(0.1, 10) == pytest.approx(0.1 * 1.02)
    # KL at 0.04: error = -0.2 exactly
    assert ctl.update(0.04, 100) == pytest.approx(0.1 * 1.02 * 0.8)
    # proportional inside the clip: KL 0.055 -> error 0.1
    before = ctl.value
    assert ctl.update(0.055, 50) == pytest.approx(before * 1.05)
    with pytest.raises(AlgosError, match="FixedKLController"):
        AdaptiveKLController(value=0.1, target=0.0, horizon=10)
