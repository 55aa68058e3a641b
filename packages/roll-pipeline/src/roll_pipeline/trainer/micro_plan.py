"""Which rows of a mini-batch go in which micro-batch, per data-parallel rank: index plans of row lengths under a
`TrainLayout` (fixed rows, dynamic batching, packing; groups kept together under `share_prefix`). The rules, and
the micro-batches built from a plan, are `micro_batches.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from roll_algos import balance_partitions, dynamic_micro_batches
from roll_algos.packing import pack_lengths

from roll_pipeline.config.roles import WorkerConfig

__all__ = [
    "BatchingMode",
    "TrainLayout",
    "group_units",
    "micro_batch_slots",
    "pack_capacity",
    "plan_micro_batches",
    "round_up",
]

BatchingMode = Literal["fixed", "dynamic", "packed"]


@dataclass(frozen=True)
class TrainLayout:
    """How a trained role cuts rows into mini-batches and micro-batches."""

    mode: BatchingMode
    rows_per_micro_batch: int
    rows_per_mini_batch: int
    max_tokens: int
    round_to: int
    share_prefix: bool = False  # keep each group's rows together (the strategy runs them as a prefix tree)
    # one attention pair's cost in tokens on the role's model (its workers' `attention_pair_weight`): a micro-batch
    # runs as a tree where `layout_cost.tree_pays`, and its computed tokens are counted so (0: wherever rows share)
    pair_weight: float = 0.0

    @classmethod
    def of(
        cls, role: WorkerConfig, packing_ok: bool = True, share_prefix: bool = False, pair_weight: float = 0.0
    ) -> TrainLayout:
        """The layout of a role's config; packing falls back to dynamic batching when the model cannot pack;
        `share_prefix` (the run's) keeps each group's rows together; `pair_weight` as the field."""
        targs = role.training_args
        if role.use_sequence_packing and packing_ok:
            mode: BatchingMode = "packed"
        elif role.use_sequence_packing or role.use_dynamic_batching_in_train:
            mode = "dynamic"
        else:
            mode = "fixed"
        return cls(
            mode=mode,
            rows_per_micro_batch=targs.per_device_train_batch_size,
            rows_per_mini_batch=targs.per_device_train_batch_size * targs.gradient_accumulation_steps,
            max_tokens=role.max_tokens_per_microbatch_in_train,
            round_to=role.sequence_length_round_in_train,
            share_prefix=share_prefix,
            pair_weight=pair_weight,
        )


def round_up(x: int, multiple: int) -> int:
    """`x` rounded up to a multiple of `multiple`."""
    return -(-x // multiple) * multiple


def pack_capacity(lengths: list[int], layout: TrainLayout) -> int:
    """Packed row length of a mini-batch: its longest row, rounded up."""
    return round_up(max(lengths), layout.round_to)


def _plan_rank(lengths: list[int], layout: TrainLayout, capacity: int) -> list[list[int]]:
    if layout.mode == "fixed":
        step = layout.rows_per_micro_batch
        return [list(range(i, min(i + step, len(lengths)))) for i in range(0, len(lengths), step)]
    if layout.mode == "dynamic":
        budget = max(layout.max_tokens, round_up(max(lengths), layout.round_to))
        return dynamic_micro_batches(lengths, budget, pad_multiple=layout.round_to).micro_batches
    bins = pack_lengths(lengths, capacity)
    per = max(1, layout.max_tokens // capacity)
    return [[i for b in bins[k : k + per] for i in b] for k in range(0, len(bins), per)]


def _plan_rank_groups(
    lengths: list[int], units: list[list[int]], layout: TrainLayout, capacity: int
) -> list[list[int]]:
    """A rank's micro-batches (indices into `lengths`) under `_plan_rank`'s budget, filled with its rows group
    by group (`units`): a group that does not fit in the room left opens the next micro-batch, one larger than a
    micro-batch fills the room left and then consecutive ones."""
    if layout.mode == "fixed":

        def fits(mb: list[int]) -> bool:
            return len(mb) <= layout.rows_per_micro_batch

    elif layout.mode == "dynamic":
        budget = max(layout.max_tokens, round_up(max(lengths[i] for u in units for i in u), layout.round_to))

        def fits(mb: list[int]) -> bool:
            return len(mb) * round_up(max(lengths[i] for i in mb), layout.round_to) <= budget

        # longest first, as `dynamic_micro_batches` fills rows: similar lengths share a micro-batch's width
        units = sorted((sorted(u, key=lambda i: -lengths[i]) for u in units), key=lambda u: -lengths[u[0]])
    else:
        per = max(1, layout.max_tokens // capacity)

        def fits(mb: list[int]) -> bool:
            return len(pack_lengths([lengths[i] for i in mb], capacity)) <= per

    plan: list[list[int]] = []
    current: list[int] = []
    for unit in units:
        if fits(current + unit):
            current += unit
            continue
        if fits(unit):  # current holds rows, or unit would have fitted
            plan.append(current)
            current = list(unit)
            continue
        for i in unit:
            if current and not fits([*current, i]):
                plan.append(current)
                current = []
            current.append(i)
    if current:
        plan.append(current)
    return plan


def _halving_cut(mb: list[int], groups: Sequence[int] | None) -> int:
    """Where `_equalise` halves a micro-batch: its middle, or with `groups` the group edge nearest it."""
    middle = len(mb) // 2
    if groups is None:
        return middle
    edges = [k for k in range(1, len(mb)) if groups[mb[k]] != groups[mb[k - 1]]]
    return min(edges, key=lambda k: abs(k - middle)) if edges else middle


def _equalise(plans: list[list[list[int]]], groups: Sequence[int] | None = None) -> list[list[list[int]]]:
    """Split the largest micro-batches of the ranks with fewer, so every rank runs as many (a split never
    exceeds the budget); ranks step their optimiser together."""
    target = max(len(p) for p in plans)
    for plan in plans:
        while len(plan) < target and any(len(mb) > 1 for mb in plan):
            big = max(range(len(plan)), key=lambda k: len(plan[k]))
            mb = plan.pop(big)
            cut = _halving_cut(mb, groups)
            plan[big:big] = [mb[:cut], mb[cut:]]
    return plans


def group_units(rows: Sequence[int], groups: Sequence[int]) -> list[list[int]]:
    """`rows` by group, the groups in the order they first appear, each group's rows in their order."""
    units: dict[int, list[int]] = {}
    for i in rows:
        units.setdefault(groups[i], []).append(i)
    return list(units.values())


def _plan_groups(
    lengths: list[int], groups: Sequence[int], layout: TrainLayout, dp_size: int, capacity: int
) -> list[list[list[int]]]:
    """`plan_micro_batches` with each group's rows together (see the module docstring)."""
    units = group_units(range(len(lengths)), groups)
    if dp_size == 1:
        return [_plan_rank_groups(lengths, units, layout, capacity)]
    share = -(-len(lengths) // dp_size)
    units = [u[k : k + share] for u in units for k in range(0, len(u), share)]
    tokens = [sum(lengths[i] for i in u) for u in units]
    equal = len(units) % dp_size == 0 and len({len(u) for u in units}) == 1
    ranks = balance_partitions(tokens, dp_size, equal_size=equal)
    plans = [
        _plan_rank_groups(lengths, [units[u] for u in rank], layout, capacity) if rank else []
        for rank in ranks
    ]
    return _equalise(plans, groups)


def plan_micro_batches(
    lengths: list[int], layout: TrainLayout, dp_size: int = 1, groups: Sequence[int] | None = None
) -> list[list[list[int]]]:
    """Per data-parallel rank, the micro-batches (lists of indices into `lengths`) of one mini-batch; packed
    rows have the whole mini-batch's capacity on every rank. A rank may get fewer micro-batches than another
    only when it has too few rows to split (`build_micro_batches` pads it). With `layout.share_prefix` and
    `groups` (the group id of each row) each group's rows stay together (see the module docstring)."""
    capacity = pack_capacity(lengths, layout)
    if layout.share_prefix and groups is not None:
        return _plan_groups(lengths, groups, layout, dp_size, capacity)
    if dp_size == 1:
        return [_plan_rank(lengths, layout, capacity)]
    ranks = balance_partitions(lengths, dp_size, equal_size=len(lengths) % dp_size == 0)
    plans = [
        [[rank[i] for i in mb] for mb in _plan_rank([lengths[i] for i in rank], layout, capacity)]
        if rank
        else []
        for rank in ranks
    ]
    return _equalise(plans)


def micro_batch_slots(lengths: list[int], layout: TrainLayout, capacity: int) -> int:
    """Token slots the forward of one micro-batch of rows of `lengths` computes, padding or packing included."""
    if layout.mode == "packed":
        return len(pack_lengths(lengths, capacity)) * capacity
    width = max(lengths)
    if layout.mode == "dynamic":
        width = round_up(width, layout.round_to)
    return len(lengths) * width
