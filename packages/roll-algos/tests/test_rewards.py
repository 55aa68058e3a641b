"""Reward processing against loop references: grouped normalisation, whitening, clipping, StarPO-S filter."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import (
    AlgosError,
    clip_advantages,
    clip_rewards,
    group_index,
    group_normalize,
    masked_mean,
    masked_var,
    masked_whiten,
    starpo_group_filter,
)

SETTINGS = settings(max_examples=50, deadline=None)
VALUES = st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=1, max_size=30)


def ref_normalize(values, keys, mode, eps):
    out = []
    for v, k in zip(values, keys, strict=True):
        group = [x for x, kk in zip(values, keys, strict=True) if kk == k]
        n = len(group)
        mean = sum(group) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (n - 1)) if n > 1 else 0.0
        out.append(v if mode == "none" else (v - mean) if mode == "mean" else (v - mean) / (std + eps))
    return out


@SETTINGS
@given(values=VALUES, data=st.data(), mode=st.sampled_from(["mean_std", "mean", "none"]))
def test_group_normalize_matches_reference(values, data, mode):
    keys = data.draw(st.lists(st.integers(-3, 3), min_size=len(values), max_size=len(values)))
    out = group_normalize(torch.tensor(values, dtype=torch.float64), torch.tensor(keys), mode, 1e-6)
    assert out.tolist() == pytest.approx(ref_normalize(values, keys, mode, 1e-6), abs=1e-6)
    batch = group_normalize(torch.tensor(values, dtype=torch.float64), None, mode, 1e-6)
    assert batch.tolist() == pytest.approx(ref_normalize(values, [0] * len(values), mode, 1e-6), abs=1e-6)


def test_group_normalize_hand_computed():
    out = group_normalize(torch.tensor([1.0, 3.0, 5.0, 7.0]), torch.tensor([0, 0, 1, 2]), "mean_std", 0.0)
    # group 0: mean 2, unbiased std sqrt(2); groups 1 and 2 are singletons -> 0
    assert out.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0])
    with pytest.raises(AlgosError, match="mean_std"):
        group_normalize(torch.zeros(2), None, "zscore")


def test_group_index_by_several_keys():
    index, n = group_index(torch.tensor([0, 0, 1, 1, 0]), torch.tensor([5, 6, 5, 5, 5]))
    assert n == 3
    assert index.tolist() == [0, 1, 2, 2, 0]


@SETTINGS
@given(seed=st.integers(0, 10**6))
def test_masked_stats_and_whiten_match_reference(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64) * 3 + 1
    mask = torch.rand(4, 6, generator=g) > 0.4
    vals = x[mask].tolist()
    if len(vals) < 2:
        return
    mean = sum(vals) / len(vals)
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    assert float(masked_mean(x, mask)) == pytest.approx(mean)
    assert float(masked_var(x, mask)) == pytest.approx(var)
    w = masked_whiten(x, mask, eps=0.0)
    assert w[mask].tolist() == pytest.approx([(v - mean) / math.sqrt(var) for v in vals])
    assert not w[~mask].any()
    assert masked_whiten(x, mask, shift_mean=False, eps=0.0)[mask].tolist() == pytest.approx(
        [(v - mean) / math.sqrt(var) + mean for v in vals]
    )


def test_clipping():
    x = torch.tensor([-3.0, -0.5, 0.5, 3.0])
    assert clip_rewards(x, 1.0).tolist() == [-1.0, -0.5, 0.5, 1.0]
    assert clip_advantages(x, None) is x
    with pytest.raises(AlgosError, match="positive bound"):
        clip_rewards(x, 0.0)


@SETTINGS
@given(seed=st.integers(0, 10**6), frac=st.sampled_from([0.1, 0.25, 0.5, 1.0]))
def test_starpo_filter_matches_reference(seed, frac):
    g = torch.Generator().manual_seed(seed)
    n_groups = int(torch.randint(1, 8, (1,), generator=g))
    groups = torch.randint(0, n_groups, (20,), generator=g)
    scores = torch.randint(0, 3, (20,), generator=g).double()
    keep = starpo_group_filter(scores, groups, frac)
    stds = {}
    for k in sorted(set(groups.tolist())):
        vals = [float(s) for s, gg in zip(scores, groups, strict=True) if gg == k]
        mean = sum(vals) / len(vals)
        stds[k] = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    ranked = sorted(stds, key=lambda k: (-round(stds[k] * 1e9), k))
    kept = set(ranked[: max(1, math.ceil(frac * len(ranked) - 1e-9))])
    assert keep.tolist() == [int(gg) in kept for gg in groups]


def test_starpo_filter_counts_each_trajectory_once():
    # group 0: trajectory 0 (score 1, 3 rows), trajectory 1 (score 0, 1 row) -> std over 2 trajectories
    # group 1: trajectories with scores 0, 2 -> larger std, kept with fraction 0.5
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 2.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    trajs = torch.tensor([0, 0, 0, 1, 2, 3])
    keep = starpo_group_filter(scores, groups, 0.5, trajectory_ids=trajs)
    assert keep.tolist() == [False, False, False, False, True, True]
