"""Dynamic micro-batching and Karmarkar-Karp balancing against loop references and hand cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import AlgosError, balance_partitions, dynamic_micro_batches, karmarkar_karp, padding_stats

SETTINGS = settings(max_examples=50, deadline=None)
LENGTHS = st.lists(st.integers(1, 300), min_size=1, max_size=60)


def round_up(x: int, m: int) -> int:
    return ((x + m - 1) // m) * m


def ref_micro_batches(lengths, max_tokens, pad_multiple):
    """Longest first; open a new micro-batch when one more member would overflow the padded budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out, cur = [], []
    for i in order:
        width = max(round_up(lengths[j], pad_multiple) for j in [*cur, i])
        if cur and (len(cur) + 1) * width > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    return [*out, cur] if cur else out


@SETTINGS
@given(lengths=LENGTHS, budget=st.integers(300, 3000), pad_multiple=st.sampled_from([1, 8, 64]))
def test_dynamic_micro_batches_matches_reference(lengths, budget, pad_multiple):
    if round_up(max(lengths), pad_multiple) > budget:
        with pytest.raises(AlgosError, match="max_tokens"):
            dynamic_micro_batches(lengths, budget, pad_multiple)
        return
    plan = dynamic_micro_batches(lengths, budget, pad_multiple)
    assert plan.micro_batches == ref_micro_batches(lengths, budget, pad_multiple)
    assert sorted(i for mb in plan.micro_batches for i in mb) == list(range(len(lengths)))
    for mb in plan.micro_batches:
        assert len(mb) * round_up(max(lengths[i] for i in mb), pad_multiple) <= budget
    padded = sum(len(mb) * round_up(max(lengths[i] for i in mb), pad_multiple) for mb in plan.micro_batches)
    naive = len(lengths) * round_up(max(lengths), pad_multiple)
    assert (plan.padded_tokens, plan.real_tokens, plan.naive_padded_tokens) == (padded, sum(lengths), naive)
    assert plan.padded_tokens <= plan.naive_padded_tokens
    assert 0.0 <= plan.removed_padding_ratio <= 1.0


def test_dynamic_micro_batches_hand_computed():
    plan = dynamic_micro_batches([10, 100, 20, 90], max_tokens=200)
    # longest first: [100, 90] costs 2 * 100 = 200; then [20, 10] costs 40
    assert plan.micro_batches == [[1, 3], [2, 0]]
    assert (plan.padded_tokens, plan.real_tokens, plan.naive_padded_tokens) == (240, 220, 400)
    assert plan.padding_fraction == pytest.approx(20 / 240)
    assert plan.naive_padding_fraction == pytest.approx(180 / 400)
    assert plan.removed_padding_ratio == pytest.approx(1 - 20 / 180)
    assert padding_stats([10, 100, 20, 90], plan.micro_batches) == (240, 220)


def ref_differencing(weights):
    """Two-way Karmarkar-Karp on numbers: replace the two largest by their difference; the last is the spread."""
    xs = sorted(weights)
    while len(xs) > 1:
        a, b = xs.pop(), xs.pop()
        xs.append(a - b)
        xs.sort()
    return xs[0] if xs else 0


@SETTINGS
@given(weights=st.lists(st.integers(0, 1000), min_size=1, max_size=40))
def test_two_way_spread_equals_number_differencing(weights):
    parts = karmarkar_karp(weights, 2)
    sums = [sum(weights[i] for i in p) for p in parts]
    assert max(sums) - min(sums) == ref_differencing(weights)


@SETTINGS
@given(
    weights=st.lists(st.integers(1, 1000), min_size=1, max_size=64), k=st.integers(1, 8), equal=st.booleans()
)
def test_kk_partition_invariants(weights, k, equal):
    if equal and len(weights) % k:
        with pytest.raises(AlgosError, match="multiple of k"):
            karmarkar_karp(weights, k, equal_size=True)
        return
    parts = karmarkar_karp(weights, k, equal_size=equal)
    assert len(parts) == k
    assert sorted(i for p in parts for i in p) == list(range(len(weights)))
    sums = [sum(weights[i] for i in p) for p in parts]
    assert sums == sorted(sums, reverse=True)
    # every merge keeps the spread at most the larger input spread; inputs' spreads are <= max weight
    assert max(sums) - min(sums) <= max(weights)
    if equal:
        assert {len(p) for p in parts} == {len(weights) // k}


def test_kk_hand_computed():
    # the classic: 8 7 6 5 4 -> differencing gives 2 (8-7=1, 6-5=1, 4-1=3, 3-1=2), though 15/15 exists
    parts = karmarkar_karp([8, 7, 6, 5, 4], 2)
    assert sorted(sum([8, 7, 6, 5, 4][i] for i in p) for p in parts) == [14, 16]
    ranks = balance_partitions([100, 10, 90, 20, 50, 50, 30, 70], world_size=4)
    assert [len(r) for r in ranks] == [2, 2, 2, 2]
    assert sorted(sum([100, 10, 90, 20, 50, 50, 30, 70][i] for i in r) for r in ranks) == [100, 100, 110, 110]
