"""Dynamic batching: micro-batches under a token budget, and work balancing across data-parallel ranks.

- `dynamic_micro_batches` sorts sequences by length and fills micro-batches greedily so that each one,
  padded to its longest member rounded up to `pad_multiple`, costs at most `max_tokens` slots.
- `karmarkar_karp` partitions weights into k subsets of near-equal sums (largest differencing method,
  optionally with equal subset sizes); `balance_partitions` applies it to sequence lengths per rank.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from roll_algos.errors import AlgosError

__all__ = [
    "DynamicBatchPlan",
    "balance_partitions",
    "dynamic_micro_batches",
    "karmarkar_karp",
    "padding_stats",
]


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def padding_stats(
    lengths: Sequence[int], micro_batches: Sequence[Sequence[int]], pad_multiple: int = 1
) -> tuple[int, int]:
    """(padded slots, real tokens) when each micro-batch is padded to its longest member (rounded up)."""
    arr = np.asarray(lengths, dtype=np.int64).reshape(-1)
    slots = sum(
        len(mb) * _round_up(int(arr[list(mb)].max()), pad_multiple) for mb in micro_batches if len(mb)
    )
    return int(slots), int(arr.sum())


class DynamicBatchPlan(NamedTuple):
    """A split of N sequences into micro-batches.

    Attributes:
        micro_batches: lists of indices into the input lengths (every index exactly once).
        padded_tokens: slots used when each micro-batch is padded to its own (rounded) max length.
        real_tokens: sum of lengths.
        naive_padded_tokens: slots when the whole batch is padded to its global (rounded) max length.
        padding_fraction: 1 - real / padded (dynamic).
        naive_padding_fraction: 1 - real / naive_padded.
        removed_padding_ratio: fraction of the naive padding removed, 1 - (padded - real) / (naive - real)
            (1.0 when the naive batch had no padding at all).
    """

    micro_batches: list[list[int]]
    padded_tokens: int
    real_tokens: int
    naive_padded_tokens: int
    padding_fraction: float
    naive_padding_fraction: float
    removed_padding_ratio: float


def dynamic_micro_batches(
    lengths: Sequence[int], max_tokens: int, pad_multiple: int = 1, descending: bool = True
) -> DynamicBatchPlan:
    """Greedy micro-batches of length-sorted sequences, each costing <= max_tokens padded slots.

    Args:
        lengths: N sequence lengths (>= 1).
        max_tokens: budget of one micro-batch: len(mb) * round_up(max len in mb, pad_multiple).
        pad_multiple: pad each micro-batch's width up to a multiple of this (e.g. 8 for tensor cores).
        descending: fill longest first (the first micro-batch is the biggest: early OOM detection).
    Returns:
        `DynamicBatchPlan`.
    """
    if pad_multiple < 1:
        raise AlgosError(f"dynamic_micro_batches: pad_multiple must be >= 1, got {pad_multiple}.")
    arr = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if arr.size and arr.min() < 1:
        raise AlgosError(f"dynamic_micro_batches: lengths must be >= 1, got {int(arr.min())}.")
    longest = _round_up(int(arr.max()), pad_multiple) if arr.size else 0
    if longest > max_tokens:
        raise AlgosError(
            f"dynamic_micro_batches: the longest sequence needs {longest} slots (rounded to {pad_multiple}), "
            f"more than max_tokens={max_tokens}. Raise max_tokens to at least {longest} or truncate it."
        )
    order = np.argsort(-arr if descending else arr, kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        w = max(width, _round_up(int(arr[i]), pad_multiple))
        if current and (len(current) + 1) * w > max_tokens:
            batches.append(current)
            current, w = [], _round_up(int(arr[i]), pad_multiple)
        current.append(int(i))
        width = w
    if current:
        batches.append(current)
    padded, real = padding_stats(arr, batches, pad_multiple)
    naive = int(arr.size) * longest
    return DynamicBatchPlan(
        micro_batches=batches,
        padded_tokens=padded,
        real_tokens=real,
        naive_padded_tokens=naive,
        padding_fraction=1.0 - real / padded if padded else 0.0,
        naive_padding_fraction=1.0 - real / naive if naive else 0.0,
        removed_padding_ratio=1.0 - (padded - real) / (naive - real) if naive > real else 1.0,
    )


def karmarkar_karp(weights: Sequence[float], k: int, equal_size: bool = False) -> list[list[int]]:
    """Partition indices of `weights` into k subsets with near-equal sums (largest differencing method).

    Each item starts as a k-tuple of subsets; the two tuples with the largest spread (max sum - min sum)
    are merged by pairing the heaviest subset of one with the lightest of the other, until one remains.
    With equal_size=True (needs len(weights) % k == 0) the initial tuples hold k consecutive items of the
    sorted weights, one per subset, so every subset ends with len/k items.

    Returns:
        k lists of indices (each sorted), ordered by decreasing subset sum.
    """
    n = len(weights)
    if k < 1:
        raise AlgosError(f"karmarkar_karp: k must be >= 1, got {k}.")
    if equal_size and n % k:
        raise AlgosError(
            f"karmarkar_karp(equal_size=True): expected a multiple of k={k} items, got {n}. "
            "Pad the batch or pass equal_size=False."
        )
    w = [float(x) for x in weights]
    tie = itertools.count()
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []

    def push(state: list[tuple[float, list[int]]]) -> None:
        state.sort(key=lambda s: -s[0])
        heapq.heappush(heap, (-(state[0][0] - state[-1][0]), next(tie), state))

    order = sorted(range(n), key=lambda i: w[i])
    if equal_size:
        for start in range(0, n, k):
            push([(w[i], [i]) for i in order[start : start + k]])
    else:
        for i in order:
            push([(w[i], [i])] + [(0.0, []) for _ in range(k - 1)])
    if not heap:
        return [[] for _ in range(k)]
    while len(heap) > 1:
        a = heapq.heappop(heap)[2]
        b = heapq.heappop(heap)[2]
        merged = [(sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a, reversed(b), strict=True)]
        push(merged)
    return [sorted(items) for _, items in heap[0][2]]


def balance_partitions(lengths: Sequence[int], world_size: int, equal_size: bool = True) -> list[list[int]]:
    """Assign sequences to `world_size` data-parallel ranks with near-equal token totals (Karmarkar-Karp).

    equal_size=True gives every rank the same number of sequences (needs N % world_size == 0).
    Returns one list of sequence indices per rank.
    """
    return karmarkar_karp(lengths, world_size, equal_size=equal_size)
