"""GSPO, Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071), registered as the policy
loss `gspo`: one importance ratio per sequence instead of one per token. Formula and when to use it:
docs/algos/policy_loss.md#gspo.
"""

from __future__ import annotations

import torch

from roll_algos.losses import PolicyLossOutput, clipped_policy_loss
from roll_algos.policy_losses import PolicyLossConfig, PolicyLossInputs, register_policy_loss

__all__ = ["GSPO_CLIP_CEILING", "GSPO_PAPER_CLIP", "gspo", "gspo_clip_problem", "sequence_ratio"]

MAX_LOG_RATIO = 20.0
"""|log s| is clamped here before the exp (the same bound as `policy_loss`'s ratios), so a far off-policy
row cannot overflow."""

GSPO_PAPER_CLIP = (3e-4, 4e-4)
"""The clip range (low, high) of the GSPO paper's experiments: a length-normalised sequence ratio sits within
about 1e-3 of 1, so PPO's token-level 0.2 would almost never clip."""

GSPO_CLIP_CEILING = 1e-2
"""A GSPO clip range above this (25x the paper's upper clip) is far off GSPO's scale (`gspo_clip_problem`)."""


def gspo_clip_problem(clip_low: float, clip_high: float) -> str | None:
    """What is wrong with clipping GSPO's sequence ratio at [1 - clip_low, 1 + clip_high], or None.

    A range above `GSPO_CLIP_CEILING` on either side leaves GSPO's ratio (within about 1e-3 of 1) unclipped:
    the update is then an unconstrained policy gradient, not GSPO.
    """
    if max(clip_low, clip_high) <= GSPO_CLIP_CEILING:
        return None
    low, high = GSPO_PAPER_CLIP
    return (
        f"gspo clips one length-normalised ratio per sequence, which sits within about 1e-3 of 1: a clip range of"
        f" (low {clip_low:g}, high {clip_high:g}) is above {GSPO_CLIP_CEILING:g} and would almost never clip; the"
        f" GSPO paper (Zheng et al. 2025) clips at low {low:g}, high {high:g} (pg_clip_low={low:g},"
        f" pg_clip_high={high:g})"
    )


def sequence_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO-token ratio [B, T]: s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)], s_i = exp(mean_t (log pi - log pi_old)).

    The sequence y_i is the True entries of row i of `response_mask` [B, T] (with trajectory-wise rows,
    every turn's response tokens of the trajectory); the mean is over those |y_i| tokens, so s_i is the
    length-normalised (geometric-mean) likelihood ratio. Every token of row i carries the value s_i, and the
    gradient flows through each token: d s_i,t / d log pi(y_t) = s_i. A row without a valid token gets
    s_i = 1. Tokens off the mask are never read, so -inf log-probs on padding give no NaN.
    """
    mask = response_mask.bool()
    log_ratio = torch.where(mask, log_probs - old_log_probs.detach(), torch.zeros_like(log_probs))
    tokens = mask.sum(dim=-1, keepdim=True).clamp(min=1)
    seq_log_ratio = log_ratio.detach().sum(dim=-1, keepdim=True) / tokens  # [B, 1] log s_i
    token_form = seq_log_ratio + log_ratio - log_ratio.detach()  # value log s_i, gradient per token
    return torch.exp(token_form.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


@register_policy_loss("gspo")
def gspo(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
    """GSPO (GSPO-token form): PPO's clipped surrogate on one length-normalised importance ratio per sequence.

    With s_i,t from `sequence_ratio` (value s_i = exp(mean over row i's response tokens of log pi - log
    pi_old), gradient through each token) and eps_low, eps_high = config.clip_low, clip_high:

        l_i,t = max(-A_i,t s_i,t, -A_i,t clip(s_i,t, 1 - eps_low, 1 + eps_high))
        loss  = aggregate(l * w)

    The sequence is row i's True entries of `response_mask` [B, T]. The advantage is read per token; GSPO
    gives one per sequence (A_i,t = A_i: a trajectory-level estimator such as grpo, or any estimator on
    step rows of one turn each). Aggregation is `config.agg_mode` over the mask: `seq-mean-token-mean` (the
    default) is the paper's objective, the mean over sequences of max(-A_i s_i, -A_i clip(s_i, ...)), whose
    gradient this reproduces exactly; `token-mean` weighs each sequence by its length. w is the truncated
    importance weight of `rollout_log_probs` (per token, `tis_cap`), 1 without them. GSPO clips far more
    tightly than PPO: typical ranges are clip_low = 3e-4, clip_high = 4e-4. Reads no `POLICY_LOSS_OPTIONS`
    (the ratio is per sequence, and there is no dual clip).

    Inputs are [B, T]; returns `PolicyLossOutput` (diagnostics over valid tokens: each carries its row's s_i).
    """
    inputs.check("gspo", config)
    return clipped_policy_loss(
        sequence_ratio(inputs.log_probs, inputs.old_log_probs, inputs.response_mask),
        *inputs[:4],  # log_probs, old_log_probs, advantages, response_mask
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        agg_mode=config.agg_mode,
        rollout_log_probs=inputs.rollout_log_probs,
        tis_cap=config.tis_cap,
        norm_constant=config.norm_constant,
    )
