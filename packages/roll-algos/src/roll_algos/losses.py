"""Losses: PPO-family policy loss (token / segment / sequence ratios, dual clip, truncated IS), value
loss, and the four aggregation modes. Every loss returns a NamedTuple with its diagnostics
(0-dim detached tensors) next to the differentiable scalar `loss`.

Formulas are in docs/algos/policy_loss.md, value_loss.md and loss_aggregation.md.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import NamedTuple

import torch

from roll_algos.errors import AlgosError, check_same_shape, check_shape

__all__ = [
    "LossAggMode",
    "PolicyLossOutput",
    "RatioLevel",
    "ValueLossOutput",
    "aggregate_loss",
    "check_policy_loss_args",
    "clipped_policy_loss",
    "contiguous_segments",
    "policy_loss",
    "value_loss",
]


class LossAggMode(StrEnum):
    """How a [B, T] per-token loss becomes a scalar (see docs/algos/loss_aggregation.md)."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


class RatioLevel(StrEnum):
    """Granularity of the importance ratio: per token (PPO), per segment / turn, per sequence (GSPO)."""

    TOKEN = "token"
    SEGMENT = "segment"
    SEQUENCE = "sequence"


def _enum(cls: type[Enum], value: object, what: str) -> Enum:
    try:
        return cls(value)
    except ValueError:
        raise AlgosError(f"{what}: expected one of {[m.value for m in cls]}, got {value!r}.") from None


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode | str = LossAggMode.TOKEN_MEAN,
    norm_constant: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss [B, T] over the True entries of mask [B, T] to a scalar.

    - token-mean: sum(l * m) / sum(m)
    - seq-mean-token-mean: mean over rows with a valid token of (sum_t l m / sum_t m)
    - seq-mean-token-sum: mean over rows with a valid token of sum_t l m
    - seq-mean-token-sum-norm: sum(l * m) / norm_constant (default T = mask.shape[-1]; Dr. GRPO)
    An all-False mask gives 0 (still connected to the graph).
    """
    mode = _enum(LossAggMode, mode, "aggregate_loss mode")
    check_shape("loss_mat", loss_mat, [None, None], hint="Pass the per-token loss [B, T].")
    check_same_shape("loss_mat", loss_mat, mask=mask)
    m = mask.to(loss_mat.dtype)
    masked = torch.where(mask.bool(), loss_mat, torch.zeros_like(loss_mat))
    if mode is LossAggMode.TOKEN_MEAN:
        return masked.sum() / m.sum().clamp(min=1)
    if mode is LossAggMode.SEQ_MEAN_TOKEN_SUM_NORM:
        return masked.sum() / (norm_constant if norm_constant is not None else loss_mat.shape[-1])
    tokens = m.sum(-1)
    per_seq = masked.sum(-1)
    if mode is LossAggMode.SEQ_MEAN_TOKEN_MEAN:
        per_seq = per_seq / tokens.clamp(min=1)
    has = (tokens > 0).to(loss_mat.dtype)
    return (per_seq * has).sum() / has.sum().clamp(min=1)


def contiguous_segments(mask: torch.Tensor) -> torch.Tensor:
    """Segment ids [B, T] long: each maximal run of True in a row gets its own id (1, 2, ...), 0 off the mask.

    In a row holding a whole multi-turn trajectory each run is one turn's response.
    """
    m = mask.bool().long()
    starts = m - torch.nn.functional.pad(m[:, :-1], (1, 0))
    return torch.cumsum(starts.clamp(min=0), dim=1) * m


def _grouped_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Mean log-ratio of each token's (row, segment), detached, + the token's own term (GSPO-token form)."""
    b, t = log_ratio.shape
    seg = torch.where(mask, segments.long(), torch.zeros_like(segments, dtype=torch.long))
    _, seg = torch.unique(seg, return_inverse=True)  # dense 0..S-1
    span = int(seg.max()) + 1 if seg.numel() else 1
    index = (torch.arange(b, device=seg.device).unsqueeze(1) * span + seg).reshape(-1)
    num = b * span
    lr = log_ratio.detach().reshape(-1)
    m = mask.reshape(-1).to(lr.dtype)
    total = torch.zeros(num, dtype=lr.dtype, device=lr.device).index_add_(0, index, lr * m)
    count = torch.zeros_like(total).index_add_(0, index, m)
    mean = (total / count.clamp(min=1))[index].reshape(b, t)
    return mean + log_ratio - log_ratio.detach()


class PolicyLossOutput(NamedTuple):
    """Policy loss and its diagnostics (diagnostics are detached 0-dim tensors over valid tokens).

    Attributes:
        loss: differentiable scalar, the aggregated policy loss.
        clip_frac: fraction of tokens where clipping changed the loss (either side).
        clip_frac_low: fraction with ratio < 1 - clip_low and A < 0 (clipped from below).
        clip_frac_high: fraction with ratio > 1 + clip_high and A > 0 (clipped from above).
        dual_clip_frac: fraction where the dual clip bound was active.
        approx_kl: mean of old_log_probs - log_probs (k1 estimate of KL(old || new)).
        ratio_mean, ratio_max, ratio_min: statistics of the importance ratio used.
        tis_weight_mean: mean truncated importance weight (1 when none applied).
    """

    loss: torch.Tensor
    clip_frac: torch.Tensor
    clip_frac_low: torch.Tensor
    clip_frac_high: torch.Tensor
    dual_clip_frac: torch.Tensor
    approx_kl: torch.Tensor
    ratio_mean: torch.Tensor
    ratio_max: torch.Tensor
    ratio_min: torch.Tensor
    tis_weight_mean: torch.Tensor


def _ratio(log_probs, old_log_probs, mask, level, segment_ids) -> torch.Tensor:
    log_ratio = torch.where(mask, log_probs - old_log_probs, torch.zeros_like(log_probs))
    if level is RatioLevel.SEGMENT:
        segments = contiguous_segments(mask) if segment_ids is None else segment_ids
        check_same_shape("log_probs", log_probs, segment_ids=segments)
        log_ratio = _grouped_log_ratio(log_ratio, mask, segments)
    elif level is RatioLevel.SEQUENCE:
        log_ratio = _grouped_log_ratio(log_ratio, mask, mask.long())
    return torch.exp(log_ratio.clamp(-20.0, 20.0))


def check_policy_loss_args(
    caller: str,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    rollout_log_probs: torch.Tensor | None,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
) -> None:
    """Raise `ShapeError` unless every tensor is [B, T] like log_probs, `AlgosError` on a negative clip range
    or a dual clip <= 1; messages start with `caller`."""
    check_shape("log_probs", log_probs, [None, None], hint="Per-token log-probs [B, T].")
    check_same_shape(
        "log_probs",
        log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        rollout_log_probs=rollout_log_probs,
    )
    if clip_low < 0 or clip_high < 0:
        raise AlgosError(
            f"{caller}: clip ranges must be >= 0, got clip_low={clip_low}, clip_high={clip_high}."
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise AlgosError(
            f"{caller}: dual_clip must be > 1 (typically 3), got {dual_clip}. Pass None to disable."
        )


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg_mode: LossAggMode | str = LossAggMode.SEQ_MEAN_TOKEN_MEAN,
    ratio_level: RatioLevel | str = RatioLevel.TOKEN,
    segment_ids: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
    tis_cap: float | None = None,
    norm_constant: float | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate: l_t = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), aggregated.

    Args:
        log_probs: [B, T] current policy log-probs (differentiable).
        old_log_probs: [B, T] log-probs of the policy that produced the advantages.
        advantages: [B, T]; response_mask: [B, T] bool.
        clip_low, clip_high: the (asymmetric) clip range; GSPO uses small values such as 3e-4 / 4e-4.
        dual_clip: c > 1; for A < 0 the loss is capped at -A * c (Ye et al. 2020). None disables.
        agg_mode: one of `LossAggMode`.
        ratio_level: `token` (PPO), `segment` (one ratio per turn: exp of the segment's mean log-ratio),
            `sequence` (GSPO: one ratio per row). Non-token ratios use the GSPO-token gradient form.
        segment_ids: [B, T] segment of each token for `segment`; default: contiguous runs of the mask.
        rollout_log_probs: [B, T] log-probs of the inference engine that sampled the tokens; when given,
            each token's loss is weighted by w = exp(old - rollout), truncated at tis_cap (detached).
        tis_cap: truncation of the importance weight (e.g. 2.0); None = untruncated.
        norm_constant: for seq-mean-token-sum-norm (default T).
    Returns:
        `PolicyLossOutput`.
    """
    check_policy_loss_args(
        "policy_loss",
        log_probs,
        old_log_probs,
        advantages,
        response_mask,
        rollout_log_probs=rollout_log_probs,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
    )
    level = _enum(RatioLevel, ratio_level, "policy_loss ratio_level")
    mask = response_mask.bool()
    ratio = _ratio(log_probs, old_log_probs.detach(), mask, level, segment_ids)
    return clipped_policy_loss(
        ratio,
        log_probs,
        old_log_probs,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
        agg_mode=agg_mode,
        rollout_log_probs=rollout_log_probs,
        tis_cap=tis_cap,
        norm_constant=norm_constant,
    )


def clipped_policy_loss(
    ratio: torch.Tensor,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
    agg_mode: LossAggMode | str = LossAggMode.SEQ_MEAN_TOKEN_MEAN,
    rollout_log_probs: torch.Tensor | None = None,
    tis_cap: float | None = None,
    norm_constant: float | None = None,
) -> PolicyLossOutput:
    """The clipped surrogate of a given importance ratio, its TIS weights, aggregation and diagnostics.

    A loss that differs from PPO only in its ratio (GSPO's per-sequence one, a plugin's) computes the ratio
    [B, T] (differentiable w.r.t. log_probs) and calls this; `policy_loss` documents the other arguments,
    which this does not validate. Tokens off `response_mask` contribute nothing.
    """
    mask = response_mask.bool()
    adv = torch.where(mask, advantages, torch.zeros_like(advantages)).detach()
    loss_mat, clip_active, dual_active = _clipped_surrogate(adv, ratio, clip_low, clip_high, dual_clip)
    tis = torch.ones_like(ratio)
    if rollout_log_probs is not None:
        log_w = torch.where(mask, old_log_probs - rollout_log_probs, torch.zeros_like(ratio)).detach()
        tis = torch.exp(log_w.clamp(max=20.0))
        if tis_cap is not None:
            tis = tis.clamp(max=tis_cap)
        loss_mat = loss_mat * tis
    loss = aggregate_loss(loss_mat, mask, agg_mode, norm_constant)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        r = ratio.detach()
        zeros = torch.zeros_like(r)

        def frac(x: torch.Tensor) -> torch.Tensor:
            return (x & mask).sum() / n

        any_valid = bool(mask.any())
        return PolicyLossOutput(
            loss=loss,
            clip_frac=frac(clip_active),
            clip_frac_low=frac((r < 1.0 - clip_low) & (adv < 0)),
            clip_frac_high=frac((r > 1.0 + clip_high) & (adv > 0)),
            dual_clip_frac=frac(dual_active),
            approx_kl=torch.where(mask, old_log_probs - log_probs.detach(), zeros).sum() / n,
            ratio_mean=torch.where(mask, r, zeros).sum() / n,
            ratio_max=r[mask].max() if any_valid else r.new_ones(()),
            ratio_min=r[mask].min() if any_valid else r.new_ones(()),
            tis_weight_mean=torch.where(mask, tis, zeros).sum() / n,
        )


def _clipped_surrogate(
    adv: torch.Tensor, ratio: torch.Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(per-token loss, where the clip changed it, where the dual clip bound it), all [B, T]."""
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(pg1, pg2)
    clip_active = (pg2 > pg1).detach()
    if dual_clip is None:
        return clipped, clip_active, torch.zeros_like(clip_active)
    pg3 = -adv * dual_clip
    dual_active = ((adv < 0) & (clipped > pg3)).detach()
    return torch.where(adv < 0, torch.minimum(clipped, pg3), clipped), clip_active, dual_active


class ValueLossOutput(NamedTuple):
    """Value loss and diagnostics. loss: differentiable scalar; clip_frac: fraction of tokens where the
    clipped term was the larger; value_mean: mean predicted value over valid tokens."""

    loss: torch.Tensor
    clip_frac: torch.Tensor
    value_mean: torch.Tensor


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_range: float | None = None,
    agg_mode: LossAggMode | str = LossAggMode.TOKEN_MEAN,
) -> ValueLossOutput:
    """0.5 * (V - R)^2, or with clip_range c: 0.5 * max((V - R)^2, (old + clamp(V - old, -c, c) - R)^2).

    All tensors [B, T]; aggregated with agg_mode over the mask.
    """
    check_shape("values", values, [None, None], hint="Per-token critic values [B, T].")
    check_same_shape("values", values, old_values=old_values, returns=returns, response_mask=response_mask)
    mask = response_mask.bool()
    unclipped = (values - returns).square()
    loss_mat = unclipped
    clipped_more = torch.zeros_like(mask)
    if clip_range is not None:
        v_clip = old_values + (values - old_values).clamp(-clip_range, clip_range)
        clipped = (v_clip - returns).square()
        loss_mat = torch.maximum(unclipped, clipped)
        clipped_more = clipped > unclipped
    loss = 0.5 * aggregate_loss(loss_mat, mask, agg_mode)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        return ValueLossOutput(
            loss=loss,
            clip_frac=(clipped_more & mask).sum() / n,
            value_mean=torch.where(mask, values, torch.zeros_like(values)).sum() / n,
        )
