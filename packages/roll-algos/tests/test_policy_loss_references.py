"""Each registered policy loss (ppo, gspo) against a slow reference written here: plain Python loops over
samples and tokens computing the ratio, the clip, the aggregated loss, and the gradient w.r.t. the new
log-probs (by hand, and by central finite differences of the loop value)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from roll_algos import (
    LossAggMode,
    PolicyLossConfig,
    PolicyLossInputs,
    compute_policy_loss,
    get_policy_loss,
    policy_loss_spec,
)

AGG_MODES = [m.value for m in LossAggMode]
SEEDS = range(6)


def random_inputs(
    seed: int, b: int = 4, t: int = 6, per_sequence_advantage: bool = False
) -> PolicyLossInputs:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[0] = False  # a row without a valid token counts in no mean
    mask[1, :2] = True
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    new = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    if per_sequence_advantage:
        adv = adv[:, :1].expand(b, t).clone()
    rollout = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    new = torch.where(mask, new, torch.full_like(new, -math.inf))  # padding log-probs are never read
    return PolicyLossInputs(new, old, adv, mask, rollout_log_probs=rollout)


# ---------------------------------------------------------------- the loop references


def valid(inputs: PolicyLossInputs, row: int) -> list[int]:
    return [t for t in range(inputs.response_mask.shape[1]) if bool(inputs.response_mask[row, t])]


def agg_weights(inputs: PolicyLossInputs, mode: str, norm_constant: float | None) -> list[list[float]]:
    """w[i][t]: the weight of token (i, t)'s loss in the aggregated scalar."""
    b, t_len = inputs.response_mask.shape
    rows = [i for i in range(b) if valid(inputs, i)]
    total = sum(len(valid(inputs, i)) for i in rows)
    w = [[0.0] * t_len for _ in range(b)]
    for i in rows:
        for t in valid(inputs, i):
            if mode == "token-mean":
                w[i][t] = 1.0 / total
            elif mode == "seq-mean-token-mean":
                w[i][t] = 1.0 / (len(rows) * len(valid(inputs, i)))
            elif mode == "seq-mean-token-sum":
                w[i][t] = 1.0 / len(rows)
            else:
                w[i][t] = 1.0 / (norm_constant or t_len)
    return w


def tis_weight(inputs: PolicyLossInputs, i: int, t: int, cap: float | None) -> float:
    if inputs.rollout_log_probs is None:
        return 1.0
    w = math.exp(float(inputs.old_log_probs[i, t]) - float(inputs.rollout_log_probs[i, t]))
    return w if cap is None else min(w, cap)


def surrogate(a: float, r: float, low: float, high: float, dual: float | None) -> tuple[float, float]:
    """(token loss, d loss / d r) of max(-a r, -a clip(r)), capped at -a * dual for a < 0."""
    unclipped, clipped = -a * r, -a * min(max(r, 1 - low), 1 + high)
    loss, slope = (unclipped, -a) if unclipped >= clipped else (clipped, 0.0)
    if dual is not None and a < 0 and loss > -a * dual:
        loss, slope = -a * dual, 0.0
    return loss, slope


def reference(
    inputs: PolicyLossInputs, config: PolicyLossConfig, sequence: bool, new: list[list[float]] | None = None
) -> tuple[float, list[list[float]]]:
    """(loss, d loss / d new log-probs) by loops. sequence=True: GSPO-token, one ratio
    s_i = exp(mean over row i's valid tokens of new - old), d s_i,t / d new_t = s_i; else PPO per token."""
    b, t_len = inputs.response_mask.shape
    new = new or [[float(inputs.log_probs[i, t]) for t in range(t_len)] for i in range(b)]
    w = agg_weights(inputs, config.agg_mode, config.norm_constant)
    loss, grad = 0.0, [[0.0] * t_len for _ in range(b)]
    for i in range(b):
        tokens = valid(inputs, i)
        if sequence and tokens:
            s = math.exp(sum(new[i][t] - float(inputs.old_log_probs[i, t]) for t in tokens) / len(tokens))
        for t in tokens:
            r = s if sequence else math.exp(new[i][t] - float(inputs.old_log_probs[i, t]))
            value, slope = surrogate(
                float(inputs.advantages[i, t]), r, config.clip_low, config.clip_high, config.dual_clip
            )
            weight = w[i][t] * tis_weight(inputs, i, t, config.tis_cap)
            loss += weight * value
            grad[i][t] = weight * slope * r  # d r / d new_t = r in both forms
    return loss, grad


def finite_difference(fn, new: list[list[float]], mask: torch.Tensor, eps: float = 1e-6) -> list[list[float]]:
    grad = [[0.0] * len(row) for row in new]
    for i, row in enumerate(new):
        for t in range(len(row)):
            if not mask[i, t]:
                continue
            up = [r[:] for r in new]
            down = [r[:] for r in new]
            up[i][t] += eps
            down[i][t] -= eps
            grad[i][t] = (fn(up) - fn(down)) / (2 * eps)
    return grad


def autograd(name: str, inputs: PolicyLossInputs, config: PolicyLossConfig) -> tuple[float, torch.Tensor]:
    log_probs = inputs.log_probs.clone().requires_grad_()
    out = compute_policy_loss(name, inputs._replace(log_probs=log_probs), config)
    out.loss.backward()
    return float(out.loss.detach()), log_probs.grad


def assert_matches(name: str, inputs: PolicyLossInputs, config: PolicyLossConfig, sequence: bool) -> None:
    value, grad = autograd(name, inputs, config)
    ref_value, ref_grad = reference(inputs, config, sequence)
    assert value == pytest.approx(ref_value, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor(ref_grad, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert torch.isfinite(grad).all()  # -inf padding gives no NaN


# ---------------------------------------------------------------- ppo, the default


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_matches_the_loop_reference(seed, mode):
    inputs = random_inputs(seed)._replace(rollout_log_probs=None)
    assert_matches(
        "ppo", inputs, PolicyLossConfig(clip_low=0.1, clip_high=0.28, agg_mode=mode), sequence=False
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_dual_clip_and_tis_match_the_loop_reference(seed):
    inputs = random_inputs(seed)
    inputs = inputs._replace(log_probs=inputs.log_probs + 0.8)  # ratios ~2.2: the dual clip binds
    config = PolicyLossConfig(clip_low=0.2, clip_high=0.2, dual_clip=1.5, tis_cap=1.2, agg_mode="token-mean")
    assert_matches("ppo", inputs, config, sequence=False)


def test_ppo_gradient_by_finite_differences():
    inputs = random_inputs(11)
    config = PolicyLossConfig(clip_low=0.1, clip_high=0.28, dual_clip=2.0, tis_cap=1.5)
    _, grad = autograd("ppo", inputs, config)
    fd = finite_difference(
        lambda new: reference(inputs, config, False, new)[0], _finite(inputs), inputs.response_mask
    )
    torch.testing.assert_close(grad, torch.tensor(fd, dtype=torch.float64), rtol=1e-5, atol=1e-8)


# ---------------------------------------------------------------- gspo


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_matches_the_loop_reference(seed, mode):
    inputs = random_inputs(seed)
    assert_matches(
        "gspo", inputs, PolicyLossConfig(clip_low=0.05, clip_high=0.08, agg_mode=mode), sequence=True
    )
    # GSPO's own ranges: most sequences of these ratios (|mean log-ratio| ~ 0.1) fall outside them
    assert_matches(
        "gspo", inputs, PolicyLossConfig(clip_low=3e-4, clip_high=4e-4, tis_cap=1.3), sequence=True
    )


def test_gspo_gradient_is_that_of_the_sequence_objective():
    """With one advantage per sequence and seq-mean-token-mean, the GSPO-token gradient equals the finite-
    difference gradient of the paper's objective J = mean_i max(-A_i s_i, -A_i clip(s_i, 1 - e_l, 1 + e_h))."""
    inputs = random_inputs(5, per_sequence_advantage=True)._replace(rollout_log_probs=None)
    config = PolicyLossConfig(clip_low=0.02, clip_high=0.03)
    rows = [i for i in range(inputs.response_mask.shape[0]) if valid(inputs, i)]

    def objective(new: list[list[float]]) -> float:
        total = 0.0
        for i in rows:
            tokens = valid(inputs, i)
            s = math.exp(sum(new[i][t] - float(inputs.old_log_probs[i, t]) for t in tokens) / len(tokens))
            total += surrogate(float(inputs.advantages[i, 0]), s, config.clip_low, config.clip_high, None)[0]
        return total / len(rows)

    value, grad = autograd("gspo", inputs, config)
    assert value == pytest.approx(objective(_finite(inputs)), rel=1e-9)
    fd = finite_difference(objective, _finite(inputs), inputs.response_mask)
    torch.testing.assert_close(grad, torch.tensor(fd, dtype=torch.float64), rtol=1e-5, atol=1e-8)
    clipped = [i for i in rows if grad[i].abs().sum() == 0]
    assert clipped and len(clipped) < len(rows)  # some sequences clipped (no gradient), some not


def test_gspo_is_ppo_with_a_sequence_ratio():
    """`gspo` and `ppo` with ratio_level=sequence compute the same GSPO-token loss (two implementations)."""
    inputs = random_inputs(3)
    config = PolicyLossConfig(clip_low=0.01, clip_high=0.02, tis_cap=1.4, agg_mode="token-mean")
    value, grad = autograd("gspo", inputs, config)
    ppo_value, ppo_grad = autograd("ppo", inputs, replace(config, ratio_level="sequence"))
    assert value == pytest.approx(ppo_value, rel=1e-12)
    torch.testing.assert_close(grad, ppo_grad)


def test_gspo_diagnostics_and_its_declaration():
    inputs = random_inputs(2)._replace(rollout_log_probs=None)
    out = get_policy_loss("gspo")(inputs, PolicyLossConfig(clip_low=3e-4, clip_high=4e-4))
    rows = [i for i in range(4) if valid(inputs, i)]
    ratios = [
        math.exp(
            sum(float(inputs.log_probs[i, t] - inputs.old_log_probs[i, t]) for t in valid(inputs, i))
            / len(valid(inputs, i))
        )
        for i in rows
    ]
    assert float(out.ratio_max) == pytest.approx(max(ratios)) and float(out.ratio_min) == pytest.approx(
        min(ratios)
    )
    assert float(out.dual_clip_frac) == 0.0 and float(out.tis_weight_mean) == 1.0
    assert policy_loss_spec("gspo").options == () and "GSPO" in policy_loss_spec("gspo").description


def _finite(inputs: PolicyLossInputs) -> list[list[float]]:
    """The new log-probs as lists, padding (-inf) set to 0 so finite differences stay finite."""
    lp = torch.where(inputs.response_mask, inputs.log_probs, torch.zeros_like(inputs.log_probs))
    return lp.tolist()
