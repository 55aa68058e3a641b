"""Policy / value losses and aggregation against loop references; hand-computed cases; gradients."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import (
    AlgosError,
    LossAggMode,
    ShapeError,
    aggregate_loss,
    contiguous_segments,
    policy_loss,
    value_loss,
)

SETTINGS = settings(max_examples=50, deadline=None)


def random_batch(seed: int, b: int = 4, t: int = 7):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=g) > 0.35
    mask[0] = False  # an empty row must not count in seq-mean modes
    lp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    old = lp + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    return lp, old, adv, mask


# ---------------------------------------------------------------- aggregation


def ref_aggregate(loss, mask, mode, norm_constant=None):
    rows = []
    total, count = 0.0, 0
    for r in range(loss.shape[0]):
        vals = [float(loss[r, c]) for c in range(loss.shape[1]) if mask[r, c]]
        total += sum(vals)
        count += len(vals)
        if vals:
            rows.append(vals)
    if mode == "token-mean":
        return total / max(count, 1)
    if mode == "seq-mean-token-mean":
        return sum(sum(v) / len(v) for v in rows) / max(len(rows), 1)
    if mode == "seq-mean-token-sum":
        return sum(sum(v) for v in rows) / max(len(rows), 1)
    return total / (norm_constant or loss.shape[1])


@SETTINGS
@given(seed=st.integers(0, 10**6), mode=st.sampled_from([m.value for m in LossAggMode]))
def test_aggregate_matches_reference(seed, mode):
    _, _, loss, mask = random_batch(seed)
    assert math.isclose(
        float(aggregate_loss(loss, mask, mode)), ref_aggregate(loss, mask, mode), abs_tol=1e-9
    )


def test_aggregate_hand_computed_and_empty():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    assert float(aggregate_loss(loss, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum")) == pytest.approx((6 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm")) == pytest.approx(10 / 3)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm", norm_constant=5)) == pytest.approx(2)
    x = torch.full((2, 3), float("nan"), requires_grad=True)
    out = aggregate_loss(x, torch.zeros(2, 3, dtype=torch.bool), "token-mean")
    assert float(out.detach()) == 0.0
    out.backward()
    with pytest.raises(AlgosError, match="token-mean"):
        aggregate_loss(loss, mask, "mean")


# ---------------------------------------------------------------- policy loss


def ref_ppo_token(lp, old, adv, clip_low, clip_high, dual):
    out = torch.zeros_like(lp)
    for r in range(lp.shape[0]):
        for c in range(lp.shape[1]):
            ratio = math.exp(float(lp[r, c]) - float(old[r, c]))
            a = float(adv[r, c])
            clipped = max(-a * ratio, -a * min(max(ratio, 1 - clip_low), 1 + clip_high))
            if dual is not None and a < 0:
                clipped = min(clipped, -a * dual)
            out[r, c] = clipped
    return out


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    clip=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]),
    dual=st.sampled_from([None, 3.0, 1.5]),
    mode=st.sampled_from([m.value for m in LossAggMode]),
)
def test_policy_loss_token_level_matches_reference(seed, clip, dual, mode):
    lp, old, adv, mask = random_batch(seed)
    out = policy_loss(lp, old, adv, mask, clip_low=clip[0], clip_high=clip[1], dual_clip=dual, agg_mode=mode)
    expected = ref_aggregate(ref_ppo_token(lp, old, adv, *clip, dual), mask, mode)
    assert math.isclose(float(out.loss), expected, rel_tol=1e-9, abs_tol=1e-9)
    # diagnostics, by loops
    toks = [(r, c) for r in range(lp.shape[0]) for c in range(lp.shape[1]) if mask[r, c]]
    ratios = [math.exp(float(lp[r, c] - old[r, c])) for r, c in toks]
    assert float(out.ratio_max) == pytest.approx(max(ratios))
    assert float(out.ratio_mean) == pytest.approx(sum(ratios) / len(ratios))
    assert float(out.approx_kl) == pytest.approx(sum(float(old[t] - lp[t]) for t in toks) / len(toks))
    high = sum(1 for (r, c), q in zip(toks, ratios, strict=True) if q > 1 + clip[1] and adv[r, c] > 0)
    low = sum(1 for (r, c), q in zip(toks, ratios, strict=True) if q < 1 - clip[0] and adv[r, c] < 0)
    assert float(out.clip_frac_high) == pytest.approx(high / len(toks))
    assert float(out.clip_frac_low) == pytest.approx(low / len(toks))
    assert float(out.clip_frac) == pytest.approx((high + low) / len(toks))


def test_policy_loss_hand_computed():
    # ratio e^0.5 = 1.6487 > 1.2 with A = +1 -> clipped: -1.2 ; ratio 1 with A = -2 -> 2 ; mean = 0.4
    lp = torch.tensor([[0.5, 0.0]], requires_grad=True)
    out = policy_loss(
        lp,
        torch.zeros(1, 2),
        torch.tensor([[1.0, -2.0]]),
        torch.ones(1, 2, dtype=torch.bool),
        agg_mode="token-mean",
    )
    assert float(out.loss.detach()) == pytest.approx(0.4)
    assert float(out.clip_frac) == pytest.approx(0.5)
    out.loss.backward()
    # the clipped token has no gradient; the other: d(-A r)/dlp = -A r / 2 tokens = 1
    assert torch.allclose(lp.grad, torch.tensor([[0.0, 1.0]]))
    # dual clip: A = -1, ratio e^2 = 7.39 -> PPO loss 7.39, capped at c * 1 = 3
    out = policy_loss(
        torch.tensor([[2.0]]),
        torch.zeros(1, 1),
        torch.tensor([[-1.0]]),
        torch.ones(1, 1).bool(),
        dual_clip=3.0,
    )
    assert float(out.loss) == pytest.approx(3.0)
    assert float(out.dual_clip_frac) == 1.0


def ref_grouped_ratio_loss(lp, old, adv, mask, seg, clip):
    """Ratio of a token = exp(mean log-ratio of its (row, segment)); PPO clip on it."""
    out = torch.zeros_like(lp)
    for r in range(lp.shape[0]):
        for s in {int(x) for x in seg[r][mask[r]]}:
            cols = [c for c in range(lp.shape[1]) if mask[r, c] and seg[r, c] == s]
            ratio = math.exp(sum(float(lp[r, c] - old[r, c]) for c in cols) / len(cols))
            for c in cols:
                a = float(adv[r, c])
                out[r, c] = max(-a * ratio, -a * min(max(ratio, 1 - clip), 1 + clip))
    return out


@SETTINGS
@given(seed=st.integers(0, 10**6), level=st.sampled_from(["segment", "sequence"]))
def test_segment_and_sequence_ratios_match_reference(seed, level):
    lp, old, adv, mask = random_batch(seed)
    seg = contiguous_segments(mask) if level == "segment" else mask.long()
    out = policy_loss(
        lp, old, adv, mask, ratio_level=level, agg_mode="token-mean", clip_low=0.1, clip_high=0.1
    )
    expected = ref_aggregate(ref_grouped_ratio_loss(lp, old, adv, mask, seg, 0.1), mask, "token-mean")
    assert math.isclose(float(out.loss), expected, rel_tol=1e-9, abs_tol=1e-9)


def test_gspo_gradient_equals_sequence_ratio_gradient():
    """With one advantage per row, GSPO-token's gradient equals that of -A * exp(mean log-ratio)."""
    torch.manual_seed(0)
    lp = (-torch.rand(3, 5, dtype=torch.float64)).requires_grad_()
    old = lp.detach() + 0.01 * torch.randn(3, 5, dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64).unsqueeze(1).expand(3, 5)
    policy_loss(lp, old, adv, mask, ratio_level="sequence", clip_low=1.0, clip_high=1.0).loss.backward()
    lp2 = lp.detach().clone().requires_grad_()
    seq_ratio = torch.exp(((lp2 - old) * mask).sum(1) / mask.sum(1))
    (-(adv[:, 0] * seq_ratio).mean()).backward()
    assert torch.allclose(lp.grad, lp2.grad)


def test_contiguous_segments():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0, 1, 1]]).bool()
    assert contiguous_segments(mask).tolist() == [[0, 1, 1, 0, 2, 0, 3, 3]]


def test_truncated_importance_weights():
    lp, old, adv, mask = random_batch(3)
    rollout = old + torch.randn_like(old)
    out = policy_loss(lp, old, adv, mask, rollout_log_probs=rollout, tis_cap=2.0, agg_mode="token-mean")
    w = torch.exp(old - rollout).clamp(max=2.0)
    expected = ref_aggregate(ref_ppo_token(lp, old, adv, 0.2, 0.2, None) * w, mask, "token-mean")
    assert float(out.loss) == pytest.approx(expected)
    assert float(out.tis_weight_mean) == pytest.approx(float(w[mask].mean()))


def test_padding_with_inf_log_probs_is_safe():
    lp = torch.tensor([[-1.0, -float("inf")]], requires_grad=True)
    out = policy_loss(
        lp, torch.tensor([[-1.0, -float("inf")]]), torch.ones(1, 2), torch.tensor([[True, False]])
    )
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(lp.grad).all()


def test_policy_loss_errors():
    lp, old, adv, mask = random_batch(0)
    with pytest.raises(ShapeError, match="advantages"):
        policy_loss(lp, old, adv[:, :2], mask)
    with pytest.raises(AlgosError, match="dual_clip must be > 1"):
        policy_loss(lp, old, adv, mask, dual_clip=0.5)
    with pytest.raises(AlgosError, match="ratio_level"):
        policy_loss(lp, old, adv, mask, ratio_level="turn")


# ---------------------------------------------------------------- value loss


@SETTINGS
@given(seed=st.integers(0, 10**6), clip=st.sampled_from([None, 0.2]))
def test_value_loss_matches_reference(seed, clip):
    v, old, ret, mask = random_batch(seed)
    out = value_loss(v, old, ret, mask, clip_range=clip)
    per = torch.zeros_like(v)
    for r in range(v.shape[0]):
        for c in range(v.shape[1]):
            a = (float(v[r, c]) - float(ret[r, c])) ** 2
            if clip is not None:
                vc = float(old[r, c]) + min(max(float(v[r, c] - old[r, c]), -clip), clip)
                a = max(a, (vc - float(ret[r, c])) ** 2)
            per[r, c] = 0.5 * a
    assert float(out.loss) == pytest.approx(ref_aggregate(per, mask, "token-mean"))
