"""Advantage estimators against slow, loop-based references; hand-computed cases; dispatch and errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageEstimator,
    AdvantageInputs,
    AlgosError,
    ShapeError,
    compute_advantages,
)

# ---------------------------------------------------------------- slow references (plain loops)


def trajectories(inp: AdvantageInputs) -> dict[int, list[int]]:
    """trajectory id -> its rows ordered by (step, row index)."""
    out: dict[int, list[int]] = {}
    for r in range(inp.response_mask.shape[0]):
        out.setdefault(int(inp.trajectory_ids[r]), []).append(r)
    for rows in out.values():
        rows.sort(key=lambda r: (int(inp.step_ids[r]), r))
    return out


def token_seq(inp: AdvantageInputs, rows: list[int]) -> list[tuple[int, int]]:
    """(row, col) of the trajectory's response tokens in turn order."""
    return [(r, c) for r in rows for c in range(inp.response_mask.shape[1]) if inp.response_mask[r, c]]


def normalize(values: list[float], x: float, mode: str, eps: float) -> float:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    if mode == "none":
        return x
    if mode == "mean":
        return x - mean
    return (x - mean) / (std + eps)


def ref_normalized_scores(inp: AdvantageInputs, mode: str, eps: float) -> dict[int, float]:
    """trajectory id -> score normalised over the trajectories (once each) of its group."""
    trajs = trajectories(inp)
    score = {t: float(inp.episode_scores[rows[0]]) for t, rows in trajs.items()}
    group = {t: int(inp.group_ids[rows[0]]) for t, rows in trajs.items()}
    return {
        t: normalize([score[u] for u in trajs if group[u] == group[t]], score[t], mode, eps) for t in trajs
    }


def ref_trajectory_level(inp: AdvantageInputs, mode: str, eps: float, gamma: float) -> torch.Tensor:
    out = torch.zeros(inp.response_mask.shape, dtype=torch.float64)
    normed = ref_normalized_scores(inp, mode, eps)
    for t, rows in trajectories(inp).items():
        seq = token_seq(inp, rows)
        for i, (r, c) in enumerate(seq):
            out[r, c] = gamma ** (len(seq) - 1 - i) * normed[t]
    return out


def ref_gae(inp: AdvantageInputs, gamma: float, lambd: float) -> tuple[torch.Tensor, torch.Tensor]:
    adv = torch.zeros(inp.response_mask.shape, dtype=torch.float64)
    for rows in trajectories(inp).values():
        seq = token_seq(inp, rows)
        last, next_v = 0.0, 0.0
        for r, c in reversed(seq):
            v = float(inp.values[r, c])
            delta = float(inp.token_rewards[r, c]) + gamma * next_v - v
            last = delta + gamma * lambd * last
            adv[r, c] = last
            next_v = v
    returns = (adv + inp.values.double()) * inp.response_mask
    return adv, returns


def ref_token_returns(inp: AdvantageInputs, gamma: float, kl_coef: float = 0.0) -> torch.Tensor:
    ret = torch.zeros(inp.response_mask.shape, dtype=torch.float64)
    for rows in trajectories(inp).values():
        running = 0.0
        for r, c in reversed(token_seq(inp, rows)):
            lr = float(inp.old_log_probs[r, c]) - float(inp.ref_log_probs[r, c])
            k3 = min(max(math.exp(-lr) + lr - 1.0, -10.0), 10.0)
            running = float(inp.token_rewards[r, c]) - kl_coef * k3 + gamma * running
            ret[r, c] = running
    return ret


def ref_batch_norm(x: torch.Tensor, mask: torch.Tensor, mode: str, eps: float) -> torch.Tensor:
    vals = [float(x[r, c]) for r in range(x.shape[0]) for c in range(x.shape[1]) if mask[r, c]]
    out = torch.zeros_like(x)
    for r in range(x.shape[0]):
        for c in range(x.shape[1]):
            if mask[r, c]:
                out[r, c] = normalize(vals, float(x[r, c]), mode, eps)
    return out


def ref_step_returns(inp: AdvantageInputs, gamma: float) -> dict[int, float]:
    """row -> discounted return over env steps of its trajectory."""
    out = {}
    for rows in trajectories(inp).values():
        running = 0.0
        for r in reversed(rows):
            running = float(inp.step_rewards[r]) + gamma * running
            out[r] = running
    return out


def spread(inp: AdvantageInputs, per_row: dict[int, float]) -> torch.Tensor:
    out = torch.zeros(inp.response_mask.shape, dtype=torch.float64)
    for r, v in per_row.items():
        out[r] = v * inp.response_mask[r].double()
    return out


# ---------------------------------------------------------------- property tests vs references

MODES = st.sampled_from(["mean_std", "mean", "none"])
GAMMAS = st.sampled_from([1.0, 0.9, 0.5])
SETTINGS = settings(max_examples=40, deadline=None)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a.double(), b.double(), rtol=1e-6, atol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 10**6), mode=MODES, gamma=GAMMAS, discrete=st.booleans())
def test_grpo_matches_reference(make_rows, seed, mode, gamma, discrete):
    inp = make_rows(seed, discrete=discrete)
    out = compute_advantages("grpo", inp, AdvantageConfig(gamma=gamma, norm_mode=mode))
    close(out.advantages, ref_trajectory_level(inp, mode, 1e-6, gamma))
    close(out.returns, out.advantages)


@SETTINGS
@given(seed=st.integers(0, 10**6), mode=MODES, gamma=GAMMAS)
def test_reinforce_is_group_mean_baseline(make_rows, seed, mode, gamma):
    inp = make_rows(seed)
    out = compute_advantages("reinforce", inp, AdvantageConfig(gamma=gamma, norm_mode=mode))
    close(out.advantages, ref_trajectory_level(inp, "none" if mode == "none" else "mean", 1e-6, gamma))


@SETTINGS
@given(seed=st.integers(0, 10**6), gamma=GAMMAS, lambd=st.sampled_from([1.0, 0.95, 0.0]), mode=MODES)
def test_gae_matches_reference(make_rows, seed, gamma, lambd, mode):
    inp = make_rows(seed)
    out = compute_advantages("gae", inp, AdvantageConfig(gamma=gamma, lambd=lambd, norm_mode=mode))
    adv, returns = ref_gae(inp, gamma, lambd)
    close(out.returns, returns)
    close(out.advantages, ref_batch_norm(adv, inp.response_mask, mode, 1e-6))


@SETTINGS
@given(seed=st.integers(0, 10**6), gamma=GAMMAS, kl_coef=st.sampled_from([0.0, 0.1]), mode=MODES)
def test_reinforce_plus_plus_matches_reference(make_rows, seed, gamma, kl_coef, mode):
    inp = make_rows(seed)
    out = compute_advantages(
        "reinforce_plus_plus", inp, AdvantageConfig(gamma=gamma, kl_coef=kl_coef, norm_mode=mode)
    )
    ret = ref_token_returns(inp, gamma, kl_coef)
    close(out.returns, ret)
    close(out.advantages, ref_batch_norm(ret, inp.response_mask, mode, 1e-6))


@SETTINGS
@given(seed=st.integers(0, 10**6), gamma=GAMMAS, mode=MODES)
def test_step_estimators_match_reference(make_rows, seed, gamma, mode):
    inp = make_rows(seed)
    cfg = AdvantageConfig(gamma=gamma, norm_mode=mode)
    ret = ref_step_returns(inp, gamma)
    close(compute_advantages("agentic_reinforce", inp, cfg).advantages, spread(inp, ret))
    normed = {}
    for r in ret:
        same_group = [ret[u] for u in ret if int(inp.group_ids[u]) == int(inp.group_ids[r])]
        normed[r] = normalize(same_group, ret[r], mode, 1e-6)
    out = compute_advantages("step_reinforce", inp, cfg)
    close(out.advantages, spread(inp, normed))
    close(out.returns, spread(inp, ret))


@SETTINGS
@given(seed=st.integers(0, 10**6), clip=st.sampled_from([None, 0.5]), whiten=st.booleans())
def test_post_processing_order(make_rows, seed, clip, whiten):
    """reward clip -> estimator -> whiten -> advantage clip -> mask."""
    inp = make_rows(seed)
    cfg = AdvantageConfig(norm_mode="none", whiten=whiten, advantage_clip=clip, reward_clip=0.8)
    out = compute_advantages("grpo", inp, cfg)
    clipped = inp._replace(episode_scores=inp.episode_scores.clamp(-0.8, 0.8))
    expected = ref_trajectory_level(clipped, "none", 1e-6, 1.0)
    if whiten:
        expected = ref_batch_norm(expected, inp.response_mask, "mean_std", 1e-6)
    if clip is not None:
        expected = expected.clamp(-clip, clip)
    close(out.advantages, expected * inp.response_mask)
    assert not out.advantages[~inp.response_mask].any()


# ---------------------------------------------------------------- hand-computed cases


def rows_of(scores_by_traj, group_of, width=4, resp=(1, 3), steps=None):
    """One row per trajectory (or several when steps is given as list of step counts)."""
    rows = []
    for t, s in enumerate(scores_by_traj):
        for k in range((steps or [1] * len(scores_by_traj))[t]):
            rows.append((t, group_of[t], k, s))
    b = len(rows)
    mask = torch.zeros(b, width, dtype=torch.bool)
    mask[:, resp[0] : resp[1]] = True
    return AdvantageInputs(
        response_mask=mask,
        token_rewards=torch.zeros(b, width),
        episode_scores=torch.tensor([r[3] for r in rows]),
        step_rewards=torch.zeros(b),
        trajectory_ids=torch.tensor([r[0] for r in rows]),
        group_ids=torch.tensor([r[1] for r in rows]),
        step_ids=torch.tensor([r[2] for r in rows]),
        anchor_ids=torch.full((b,), -1),
    )


def test_grpo_hand_computed_counts_each_trajectory_once():
    # group 0: trajectory 0 (score 1, three rows) and trajectory 1 (score 0, one row).
    # Per trajectory: mean 0.5, unbiased std sqrt(0.5) -> +-0.70710..., regardless of row counts.
    # A row-weighted statistic would give mean 0.75 instead.
    inp = rows_of([1.0, 0.0], [0, 0], steps=[3, 1])
    adv = compute_advantages("grpo", inp).advantages
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert torch.allclose(adv[:3, 1:3], torch.full((3, 2), expected))
    assert torch.allclose(adv[3, 1:3], torch.full((2,), -expected))
    assert adv[:, 0].eq(0).all() and adv[:, 3].eq(0).all()


def test_grpo_group_of_one_and_equal_scores_give_zero():
    inp = rows_of([3.0, 2.0, 2.0], [0, 1, 1])
    adv = compute_advantages("grpo", inp).advantages
    assert adv.eq(0).all()


def test_grpo_gamma_discounts_from_trajectory_end():
    # one trajectory of two rows with 2 response tokens each, score normalised against a 0-score twin:
    # tokens after: 3, 2 (row 0), 1, 0 (row 1) -> 0.5**3, 0.5**2, 0.5, 1 times the normalised score.
    inp = rows_of([1.0, 0.0], [0, 0], steps=[2, 1])
    adv = compute_advantages("grpo", inp, AdvantageConfig(gamma=0.5, norm_mode="mean")).advantages
    assert torch.allclose(adv[0, 1:3], torch.tensor([0.0625, 0.125]))
    assert torch.allclose(adv[1, 1:3], torch.tensor([0.25, 0.5]))


def test_gae_hand_computed():
    # one row, 3 response tokens, reward 1 on the last; V = (0.5, 0.5, 0.5); gamma 1, lambda 1:
    # returns are 1, 1, 1 and A = 1 - V = 0.5 each.
    inp = rows_of([1.0], [0], width=3, resp=(0, 3))._replace(
        token_rewards=torch.tensor([[0.0, 0.0, 1.0]]), values=torch.full((1, 3), 0.5)
    )
    out = compute_advantages("gae", inp, AdvantageConfig(norm_mode="none"))
    assert torch.allclose(out.advantages, torch.full((1, 3), 0.5))
    assert torch.allclose(out.returns, torch.ones(1, 3))
    # gamma 0.5, lambda 0: delta_2 = 1 - 0.5, delta_1 = 0 + 0.25 - 0.5, delta_0 = same
    out = compute_advantages("gae", inp, AdvantageConfig(gamma=0.5, lambd=0.0, norm_mode="none"))
    assert torch.allclose(out.advantages, torch.tensor([[-0.25, -0.25, 0.5]]))


def test_agentic_reinforce_hand_computed():
    # rewards per turn 1, 0, 2 with gamma 0.5: G = 1 + 0.5 * (0 + 0.5 * 2) = 1.5, 1.0, 2.0
    inp = rows_of([3.0], [0], steps=[3])._replace(step_rewards=torch.tensor([1.0, 0.0, 2.0]))
    adv = compute_advantages("agentic_reinforce", inp, AdvantageConfig(gamma=0.5)).advantages
    assert torch.allclose(adv[:, 1], torch.tensor([1.5, 1.0, 2.0]))


# ---------------------------------------------------------------- dispatch, registry, errors


def test_every_enum_value_is_registered_and_accepts_the_common_shape(make_rows):
    inp = make_rows(0)
    assert set(ADVANTAGE_ESTIMATORS) == set(AdvantageEstimator)
    for name in AdvantageEstimator:
        out = compute_advantages(name.value, inp)
        assert out.advantages.shape == inp.response_mask.shape
        assert torch.isfinite(out.advantages).all()
        assert not out.advantages[~inp.response_mask].any()


def test_unknown_estimator_suggests_close_match(make_rows):
    with pytest.raises(AlgosError, match="Did you mean 'grpo'"):
        compute_advantages("gpro", make_rows(0))


def test_shape_errors_say_what_to_fix(make_rows):
    inp = make_rows(1)
    with pytest.raises(ShapeError, match=r"token_rewards: expected shape \[\d+, 8\]"):
        compute_advantages("grpo", inp._replace(token_rewards=inp.token_rewards[:, :3]))
    with pytest.raises(ShapeError, match=r"dtype torch\.bool"):
        compute_advantages("grpo", inp._replace(response_mask=inp.response_mask.long()))
    with pytest.raises(AlgosError, match="values"):
        compute_advantages("gae", inp._replace(values=None))
    with pytest.raises(AlgosError, match="kl_coef"):
        compute_advantages(
            "reinforce_plus_plus", inp._replace(ref_log_probs=None), AdvantageConfig(kl_coef=0.1)
        )
    counts = torch.bincount(torch.unique(inp.trajectory_ids, return_inverse=True)[1])
    row = int((counts[torch.unique(inp.trajectory_ids, return_inverse=True)[1]] > 1).nonzero()[0])
    bad = inp.episode_scores.clone()
    bad[row] += 1
    with pytest.raises(ShapeError, match="one value per trajectory"):
        compute_advantages("grpo", inp._replace(episode_scores=bad))


def test_config_validation():
    with pytest.raises(AlgosError, match="gamma"):
        AdvantageConfig(gamma=1.5)
    with pytest.raises(AlgosError, match="norm_mode"):
        AdvantageConfig(norm_mode="std")


def test_float32_inputs_stay_float32(make_rows):
    inp = make_rows(3, dtype=torch.float32)
    for name in AdvantageEstimator:
        assert compute_advantages(name, inp).advantages.dtype == torch.float32


def test_reinforce_plus_plus_hand_computed():
    # one trajectory of two rows (one response token each), rewards 0 then 1, gamma 0.5, no KL:
    # returns 0.5, 1 ; batch mean 0.75, unbiased std sqrt(0.125) -> advantages -+ 0.25 / 0.35355
    inp = rows_of([1.0], [0], width=2, resp=(1, 2), steps=[2])
    inp = inp._replace(token_rewards=torch.tensor([[0.0, 0.0], [0.0, 1.0]]))
    out = compute_advantages("reinforce_plus_plus", inp, AdvantageConfig(gamma=0.5, epsilon=0.0))
    assert out.returns[:, 1].tolist() == pytest.approx([0.5, 1.0])
    assert out.advantages[:, 1].tolist() == pytest.approx([-0.25 / math.sqrt(0.125), 0.25 / math.sqrt(0.125)])
    # with KL: log-ratio x = old - ref = 1 on both tokens -> k3 = e^-1 + 1 - 1 = 0.3679; beta 0.1
    inp = inp._replace(old_log_probs=torch.zeros(2, 2), ref_log_probs=-torch.ones(2, 2))
    out = compute_advantages("reinforce_plus_plus", inp, AdvantageConfig(kl_coef=0.1, norm_mode="none"))
    k3 = math.exp(-1)
    assert out.returns[:, 1].tolist() == pytest.approx([1 - 2 * 0.1 * k3, 1 - 0.1 * k3])


def test_step_reinforce_hand_computed():
    # group 0: trajectory 0 with step rewards (1, 1), trajectory 1 with (0,); gamma 1:
    # step returns 2, 1, 0 -> mean 1, unbiased std 1 -> 1, 0, -1
    inp = rows_of([2.0, 0.0], [0, 0], steps=[2, 1])._replace(step_rewards=torch.tensor([1.0, 1.0, 0.0]))
    out = compute_advantages("step_reinforce", inp, AdvantageConfig(epsilon=0.0))
    assert out.advantages[:, 1].tolist() == pytest.approx([1.0, 0.0, -1.0])
    assert out.returns[:, 1].tolist() == pytest.approx([2.0, 1.0, 0.0])
