"""The builtin advantage estimators other than GiGPO, registered in `ADVANTAGE_ESTIMATORS` on import.

Every one takes `(AdvantageInputs, AdvantageConfig)` and returns `AdvantageOutput`; see
docs/algos/<name>.md for formulas and when to use them. Orders used throughout:
- a trajectory's *token sequence* is its rows' response tokens in (step_id, row, column) order, prompt
  tokens skipped, so token-level scans cross turn boundaries (a turn's return includes later turns);
- a trajectory's *step sequence* is its rows in (step_id, row) order, one env step per row.
"""

from __future__ import annotations

import torch

from roll_algos import _layout as L
from roll_algos.advantages import AdvantageConfig, AdvantageEstimator, AdvantageInputs, AdvantageOutput
from roll_algos.errors import AlgosError
from roll_algos.kl import kl_penalty
from roll_algos.registry import register_estimator
from roll_algos.rewards import NormMode, group_normalize, masked_mean, masked_whiten, unique_first

__all__ = [
    "agentic_reinforce",
    "gae",
    "grpo",
    "reinforce",
    "reinforce_plus_plus",
    "spread_over_tokens",
    "step_reinforce",
    "step_returns",
    "trajectory_normalized_scores",
]


def _float(inputs: AdvantageInputs) -> torch.dtype:
    dt = inputs.token_rewards.dtype
    return dt if dt.is_floating_point else torch.float32


def spread_over_tokens(row_values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] per-row value -> [B, T] on the row's response tokens, 0 elsewhere."""
    return row_values.unsqueeze(1) * response_mask.to(row_values.dtype)


def trajectory_normalized_scores(inputs: AdvantageInputs, mode: NormMode | str, eps: float) -> torch.Tensor:
    """Episode score normalised within its env group, each trajectory counted once. Returns [B] per row."""
    first, inverse = unique_first(inputs.trajectory_ids)
    scores = inputs.episode_scores[first].to(_float(inputs))
    normed = group_normalize(scores, inputs.group_ids[first], mode, eps)
    return normed[inverse]


def step_returns(inputs: AdvantageInputs, gamma: float) -> torch.Tensor:
    """Discounted return over env steps of each row: G(k) = r(k) + gamma * G(k+1). Returns [B]."""
    layout = L.row_layout(inputs.trajectory_ids, inputs.step_ids)
    dense = L.to_dense(inputs.step_rewards.to(_float(inputs)), layout)
    return L.from_dense(L.discounted_returns(dense, gamma), layout, inputs.step_rewards.shape)


def _token_discount(inputs: AdvantageInputs, gamma: float, dtype: torch.dtype) -> torch.Tensor:
    """[B, T]: gamma ** (number of the trajectory's response tokens after this one), 0 off the mask."""
    mask = inputs.response_mask
    if gamma == 1.0:
        return mask.to(dtype)
    layout = L.token_layout(mask, inputs.trajectory_ids, inputs.step_ids)
    after = (layout.lengths[layout.traj] - 1 - layout.pos).to(torch.float64)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    out.view(-1)[layout.items] = torch.pow(torch.tensor(gamma, dtype=torch.float64), after).to(dtype)
    return out


def _trajectory_level(
    inputs: AdvantageInputs, config: AdvantageConfig, mode: NormMode | str
) -> AdvantageOutput:
    score = trajectory_normalized_scores(inputs, mode, config.epsilon)
    adv = spread_over_tokens(score, inputs.response_mask) * _token_discount(inputs, config.gamma, score.dtype)
    return AdvantageOutput(adv, adv.clone())


@register_estimator(AdvantageEstimator.GRPO, level="trajectory", group_based=True)
def grpo(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """GRPO / StarPO trajectory-wise: A = gamma^(tokens after t) * normalise_group(score) (norm_mode)."""
    return _trajectory_level(inputs, config, config.norm_mode)


@register_estimator(AdvantageEstimator.REINFORCE, level="trajectory", group_based=True)
def reinforce(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """REINFORCE with the group-mean baseline: A = gamma^(tokens after t) * (score - mean_group(score)).

    Never divides by the std; norm_mode `none` drops the baseline (raw score).
    """
    mode = NormMode.NONE if config.norm_mode == NormMode.NONE.value else NormMode.MEAN
    return _trajectory_level(inputs, config, mode)


def _normalize_tokens(x: torch.Tensor, mask: torch.Tensor, mode: str, eps: float) -> torch.Tensor:
    """Batch-level normalisation over the valid tokens by norm_mode (unbiased std)."""
    if mode == NormMode.NONE.value:
        return x
    if mode == NormMode.MEAN_STD.value:
        return masked_whiten(x, mask, eps=eps)
    return (x - masked_mean(x, mask)) * mask.to(x.dtype)


@register_estimator(
    AdvantageEstimator.GAE, level="token", group_based=False, needs_critic=True, options=("lambd",)
)
def gae(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """GAE over each trajectory's token sequence; returns = A + V; A then normalised by norm_mode over the batch."""
    if inputs.values is None:
        raise AlgosError(
            "gae: expected AdvantageInputs.values [B, T] from the critic, got None. "
            "Compute values first, or pick an estimator without a critic (grpo, gigpo, ...)."
        )
    mask = inputs.response_mask
    dtype = _float(inputs)
    layout = L.token_layout(mask, inputs.trajectory_ids, inputs.step_ids)
    rewards = L.to_dense(inputs.token_rewards.to(dtype), layout)
    values = L.to_dense(inputs.values.to(dtype), layout)
    adv_dense = L.gae_dense(rewards, values, L.valid_dense(layout, mask.device), config.gamma, config.lambd)
    adv = L.from_dense(adv_dense, layout, mask.shape)
    returns = (adv + inputs.values.to(dtype)) * mask.to(dtype)
    adv = _normalize_tokens(adv, mask, config.norm_mode, config.epsilon)
    return AdvantageOutput(adv, returns)


@register_estimator(
    AdvantageEstimator.REINFORCE_PLUS_PLUS,
    level="token",
    group_based=False,
    options=("kl_coef", "kl_estimator"),
)
def reinforce_plus_plus(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """REINFORCE++: r_t - beta KL_t, token-level discounted returns, normalised over the whole batch."""
    mask = inputs.response_mask
    dtype = _float(inputs)
    rewards = inputs.token_rewards.to(dtype)
    if config.kl_coef > 0:
        if inputs.old_log_probs is None or inputs.ref_log_probs is None:
            raise AlgosError(
                "reinforce_plus_plus with kl_coef > 0: expected old_log_probs and ref_log_probs "
                "[B, T], got None. Pass both, or set kl_coef=0."
            )
        kl = kl_penalty(inputs.old_log_probs, inputs.ref_log_probs, config.kl_estimator).to(dtype)
        rewards = rewards - config.kl_coef * kl * mask.to(dtype)
    layout = L.token_layout(mask, inputs.trajectory_ids, inputs.step_ids)
    returns = L.from_dense(
        L.discounted_returns(L.to_dense(rewards, layout), config.gamma), layout, mask.shape
    )
    adv = _normalize_tokens(returns, mask, config.norm_mode, config.epsilon)
    return AdvantageOutput(adv, returns)


@register_estimator(AdvantageEstimator.STEP_REINFORCE, level="step", group_based=True)
def step_reinforce(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """Discounted step returns G(k), normalised within the env group (each step row once) by norm_mode."""
    ret = step_returns(inputs, config.gamma)
    adv = group_normalize(ret, inputs.group_ids, config.norm_mode, config.epsilon)
    mask = inputs.response_mask
    return AdvantageOutput(spread_over_tokens(adv, mask), spread_over_tokens(ret, mask))


@register_estimator(AdvantageEstimator.AGENTIC_REINFORCE, level="step", group_based=False)
def agentic_reinforce(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """Per-turn discounting: every token of turn k gets G(k) = r(k) + gamma * G(k+1); no normalisation."""
    ret = step_returns(inputs, config.gamma)
    spread = spread_over_tokens(ret, inputs.response_mask)
    return AdvantageOutput(spread, spread.clone())
