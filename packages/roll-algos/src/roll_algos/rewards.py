"""Reward processing: grouped normalisation, masked statistics, whitening, clipping, StarPO-S filter.

Every function is pure and vectorised (scatter-adds over group indices, no Python loop over groups).
Conventions:
- standard deviations are unbiased (divide by n - 1); a group of one has mean = its value and std = 0,
  so its normalised value is exactly 0 in both `mean` and `mean_std` mode;
- `mean_std` divides by (std + eps), so a group whose members are all equal also gives exactly 0.
"""

from __future__ import annotations

import math
from enum import StrEnum

import torch

from roll_algos.errors import AlgosError, check_same_shape, check_shape

__all__ = [
    "NormMode",
    "clip_advantages",
    "clip_rewards",
    "group_index",
    "group_normalize",
    "group_stats",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "starpo_group_filter",
    "unique_first",
]


class NormMode(StrEnum):
    """How `group_normalize` normalises: subtract the group mean, also divide by its std, or nothing."""

    MEAN_STD = "mean_std"
    MEAN = "mean"
    NONE = "none"


def _norm_mode(mode: NormMode | str) -> NormMode:
    try:
        return NormMode(mode)
    except ValueError:
        valid = [m.value for m in NormMode]
        raise AlgosError(f"norm mode: expected one of {valid}, got {mode!r}.") from None


def group_index(*keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index of each element, grouping by exact equality of all `keys` together.

    Args:
        keys: one or more integer tensors [N] (e.g. group_ids, anchor_ids).
    Returns:
        (index [N] long in 0..G-1, G). Groups are numbered in sorted order of their key tuples.
    """
    if not keys:
        raise AlgosError("group_index: expected at least one key tensor [N], got none.")
    n = keys[0].shape[0]
    for i, key in enumerate(keys):
        check_shape(f"keys[{i}]", key, [n], hint="Every key is one integer per element.")
    # rank each key (1D unique is fast; unique over rows is not), then fold ranks pairwise:
    # (rank_a, rank_b) -> rank_a * n_b + rank_b keeps the lexicographic order and fits in int64
    uniq, inverse = torch.unique(keys[0], return_inverse=True)
    num = int(uniq.shape[0])
    for key in keys[1:]:
        uniq_k, inv_k = torch.unique(key, return_inverse=True)
        uniq, inverse = torch.unique(inverse * int(uniq_k.shape[0]) + inv_k, return_inverse=True)
        num = int(uniq.shape[0])
    return inverse.long(), num


def unique_first(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ids [N]: (first [U] = the position of the first occurrence of each distinct id, inverse [N]).

    `values[first]` picks one entry per distinct id (e.g. one row per trajectory); `x[inverse]`
    broadcasts a per-id result back to every entry.
    """
    inverse, num = group_index(ids)
    positions = torch.arange(ids.shape[0], device=ids.device)
    first = torch.full((num,), ids.shape[0], dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")
    return first, inverse


def group_stats(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, ...]:
    """Per-group (count [G], mean [G], unbiased std [G]) of values [N] grouped by index [N] (two-pass).

    A group of one has std 0.
    """
    x = values.to(torch.float64)
    count = torch.zeros(num_groups, dtype=torch.float64, device=x.device).index_add_(
        0, index, torch.ones_like(x)
    )
    total = torch.zeros_like(count).index_add_(0, index, x)
    mean = total / count.clamp(min=1)
    sq = torch.zeros_like(count).index_add_(0, index, (x - mean[index]) ** 2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return count, mean, std


def group_normalize(
    values: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    mode: NormMode | str = NormMode.MEAN_STD,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Normalise values [N] within groups: (x - mean_g) / (std_g + eps) (`mean_std`), x - mean_g (`mean`), x (`none`).

    Args:
        values: [N] float.
        group_ids: [N] integer group key; None normalises over the whole batch (one group). Pass
            `group_index(a, b)[0]` to group by several keys (e.g. env group and anchor state).
        mode: `mean_std`, `mean` or `none`.
        eps: added to the std before dividing.
    Returns:
        [N], values' dtype. A group of one gives 0.
    """
    mode = _norm_mode(mode)
    check_shape("values", values, [None])
    if mode is NormMode.NONE:
        return values.clone()
    if group_ids is None:
        index, num = torch.zeros_like(values, dtype=torch.long), 1
    else:
        check_same_shape("values", values, group_ids=group_ids)
        index, num = group_index(group_ids)
    _, mean, std = group_stats(values, index, num)
    out = values.to(torch.float64) - mean[index]
    if mode is NormMode.MEAN_STD:
        denom = std[index] + eps
        # a zero-std group (singleton or all equal) has zero deviations: 0, also with eps = 0
        out = torch.where(
            denom > 0, out / denom.clamp(min=torch.finfo(torch.float64).tiny), torch.zeros_like(out)
        )
    return out.to(values.dtype)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of values over the True entries of mask (same shape); 0 where the mask is empty."""
    check_same_shape("values", values, mask=mask)
    m = mask.to(values.dtype)
    total = (values * m).sum() if dim is None else (values * m).sum(dim)
    count = m.sum() if dim is None else m.sum(dim)
    return total / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance (scalar) of values over the True entries of mask; 0 with fewer than two entries."""
    mean = masked_mean(values, mask)
    m = mask.to(values.dtype)
    n = m.sum()
    sq = (((values - mean) * m) ** 2).sum()
    denom = (n - 1) if unbiased else n
    return sq / denom.clamp(min=1)


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Whiten over the valid tokens: (x - mean) / (std + eps) on the mask, 0 off it (unbiased std).

    With shift_mean=False the mean is added back (only the scale changes).
    """
    mean = masked_mean(values, mask)
    std = masked_var(values, mask).sqrt()
    denom = std + eps
    out = torch.where(denom > 0, (values - mean) / denom.clamp(min=torch.finfo(denom.dtype).tiny), 0.0)
    if not shift_mean:
        out = out + mean
    return out * mask.to(values.dtype)


def clip_rewards(rewards: torch.Tensor, bound: float | None) -> torch.Tensor:
    """Clamp rewards to [-bound, bound]; None leaves them unchanged."""
    return _clip(rewards, bound, "reward")


def clip_advantages(advantages: torch.Tensor, bound: float | None) -> torch.Tensor:
    """Clamp advantages to [-bound, bound]; None leaves them unchanged."""
    return _clip(advantages, bound, "advantage")


def _clip(values: torch.Tensor, bound: float | None, what: str) -> torch.Tensor:
    if bound is None:
        return values
    if bound <= 0:
        raise AlgosError(
            f"{what} clip: expected a positive bound, got {bound}. Pass None to disable clipping."
        )
    return values.clamp(-bound, bound)


def starpo_group_filter(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    keep_fraction: float = 0.25,
    trajectory_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """StarPO-S uncertainty filter: keep the groups whose score std is in the top `keep_fraction`.

    Args:
        scores: [N] episode score of each entry (trajectory, or row when trajectory_ids is given).
        group_ids: [N] env group of each entry.
        keep_fraction: in (0, 1]; ceil(keep_fraction * G) groups are kept (at least one).
        trajectory_ids: [N] optional; when given, each trajectory counts once in its group's std.
    Returns:
        keep [N] bool: True for entries of kept groups. Ties in std (to 1e-9) keep the smaller group key first.
    """
    if not 0 < keep_fraction <= 1:
        raise AlgosError(f"starpo_group_filter: expected keep_fraction in (0, 1], got {keep_fraction}.")
    check_same_shape("scores", scores, group_ids=group_ids, trajectory_ids=trajectory_ids)
    if scores.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool)
    if trajectory_ids is not None:
        first, _ = unique_first(trajectory_ids)
        s, g = scores[first], group_ids[first]
    else:
        s, g = scores, group_ids
    uniq = torch.unique(group_ids)
    index = torch.searchsorted(uniq, g)
    _, _, std = group_stats(s, index, int(uniq.shape[0]))
    num_keep = max(1, math.ceil(keep_fraction * uniq.shape[0] - 1e-9))
    # ties (to 1e-9, so float noise cannot reorder equal stds) keep the smaller group key first
    order = torch.sort(-torch.round(std * 1e9), stable=True).indices[:num_keep]
    return torch.isin(group_ids, uniq[order])
