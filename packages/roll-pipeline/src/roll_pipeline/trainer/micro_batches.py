"""Mini-batches and micro-batches of the train path: fixed rows, dynamic batching, or packing.

A mini-batch (one optimiser step) is `per_device_train_batch_size x gradient_accumulation_steps` rows,
as equal as possible (`mini_batches`). Its micro-batches (one forward/backward each) are:

- `fixed`: `per_device_train_batch_size` rows, each micro-batch padded to its longest row;
- `dynamic`: rows sorted by length, filled greedily while rows x (longest row, rounded up to
  `sequence_length_round_in_train`) <= `max_tokens_per_microbatch_in_train` (`roll_algos.dynamic_micro_batches`);
- `packed`: sequences packed best-fit into rows of `capacity` = the mini-batch's longest row (rounded), and
  `max_tokens // capacity` packed rows per micro-batch; the strategy re-packs each micro-batch with the same
  capacity (`roll_strategies.compute.forward`), so the slots counted here are the slots it computes.

With N data-parallel ranks (the role's `data_parallel_size`) the mini-batch's rows are first balanced by tokens
(`roll_algos.balance_partitions`, Karmarkar-Karp), each rank cuts its share as above, and every rank gets the
same number of micro-batches (the largest ones of the ranks with fewer are split; a rank still short, e.g. with
no row at all, runs copies of a row weighted 0: ZeRO's collectives need every rank in every forward and
backward). Each micro-batch's loss is weighted by its share of the whole mini-batch's loss units, all ranks
together (response tokens for `token-mean`, rows otherwise), so the accumulated gradient does not depend on how
rows were split, nor over how many ranks.

Mini-batches shuffle whole groups (`groups`: one id per row; a group's rows share their prompt) wherever the
groups are known (`group_mini_batches`), `share_prefix` or not, so the switch never changes which rows an optimiser
step trains. With `share_prefix` (the strategies then run each micro-batch as one prefix tree where it pays,
computing the tokens its rows share once) the later cuts keep each group's rows together too: the ranks are
balanced with groups as units (a group larger than a rank's share of rows is cut into consecutive pieces), and
each rank fills its micro-batches group by group under the same budget, a group that does not fit in the room
left opening the next micro-batch and one larger than a micro-batch filling consecutive ones. Within a mini-batch the groups are first sorted by
their tokens, and each group's rows too (`prefix_order`), so rows that start alike share micro-batches and
their common start. The weights are the same shares as above, so the
gradient is the same whatever the cuts. Without it (or without `groups`) the micro-batch cuts are the ones above.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from roll_algos import balance_partitions, dynamic_micro_batches
from roll_algos.packing import pack_lengths
from roll_strategies.compute.layout_cost import trie_pays

from roll_pipeline.config.roles import WorkerConfig

__all__ = [
    "BatchingMode",
    "PaddingStats",
    "TrainLayout",
    "build_micro_batches",
    "group_mini_batches",
    "mini_batches",
    "plan_micro_batches",
    "prefix_order",
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


@dataclass
class PaddingStats:
    """Token slots of the micro-batches run in a step, against padding every mini-batch to its longest row."""

    real_tokens: int = 0
    padded_tokens: int = 0
    naive_tokens: int = 0
    distinct_tokens: int = 0
    """The tokens the forwards compute: the prefix-tree nodes of each micro-batch that runs as a tree (under
    share_prefix, where it pays), the real tokens of the others."""
    seconds: float = 0.0
    micro_batches: int = 0

    def add(self, other: PaddingStats) -> None:
        """Accumulate another mini-batch's counts."""
        self.real_tokens += other.real_tokens
        self.padded_tokens += other.padded_tokens
        self.naive_tokens += other.naive_tokens
        self.distinct_tokens += other.distinct_tokens
        self.micro_batches += other.micro_batches

    def metrics(self, prefix: str) -> dict[str, float]:
        """`{prefix}/removed_padding_ratio`, padding fractions, micro-batch count, train tokens/s."""
        excess_naive = self.naive_tokens - self.real_tokens
        return {
            f"{prefix}/removed_padding_ratio": (
                1.0 - (self.padded_tokens - self.real_tokens) / excess_naive if excess_naive > 0 else 1.0
            ),
            f"{prefix}/padding_fraction": 1.0 - self.real_tokens / max(self.padded_tokens, 1),
            f"{prefix}/naive_padding_fraction": 1.0 - self.real_tokens / max(self.naive_tokens, 1),
            f"{prefix}/micro_batches": float(self.micro_batches),
            f"{prefix}/train_tokens_per_s": self.real_tokens / self.seconds if self.seconds > 0 else 0.0,
            f"{prefix}/distinct_token_fraction": self.distinct_tokens / max(self.real_tokens, 1),
            f"{prefix}/train_distinct_tokens_per_s": self.distinct_tokens / self.seconds
            if self.seconds > 0
            else 0.0,
        }


def mini_batches(order: torch.Tensor, max_rows: int) -> list[torch.Tensor]:
    """Split row indices into the fewest mini-batches of at most `max_rows`, as equal as possible.

    Why equal: every mini-batch gets a full optimiser step, and Adam's step size does not shrink with
    the batch, so a remainder of a few rows would be one noisy full-size step per rollout.
    """
    count = max(1, -(-len(order) // max_rows))
    return [chunk for chunk in torch.tensor_split(order, count) if len(chunk)]


def group_mini_batches(groups: torch.Tensor, max_rows: int, generator: torch.Generator) -> list[torch.Tensor]:
    """`mini_batches` of whole groups (`groups`: [R] the group id of each row): the groups in a random order
    (drawn from `generator`), each group's rows together in their order, cut into as many mini-batches as
    `mini_batches` makes, each cut at the group edge nearest the equal cut among those that keep every
    mini-batch within `max_rows` (inside a group only where no edge does)."""
    _, inverse = torch.unique(groups, return_inverse=True)
    count_groups = int(inverse.max()) + 1 if len(inverse) else 0
    members = [
        torch.nonzero(inverse == g).flatten() for g in torch.randperm(count_groups, generator=generator)
    ]
    if not members:
        return []
    order = torch.cat(members)
    edges = sorted(set(itertools.accumulate(len(m) for m in members)))
    total = len(order)
    count = max(1, -(-total // max_rows))
    cuts = [0]
    for k in range(1, count):
        # every later mini-batch keeps at least one row and at most max_rows
        lo = max(cuts[-1] + 1, total - (count - k) * max_rows)
        hi = min(cuts[-1] + max_rows, total - (count - k))
        ideal = k * total / count
        inside = [e for e in edges if lo <= e <= hi]
        cuts.append(min(inside, key=lambda e: abs(e - ideal)) if inside else min(max(round(ideal), lo), hi))
    cuts.append(total)
    return [order[a:b] for a, b in itertools.pairwise(cuts)]


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def pack_capacity(lengths: list[int], layout: TrainLayout) -> int:
    """Packed row length of a mini-batch: its longest row, rounded up."""
    return _round_up(max(lengths), layout.round_to)


def _plan_rank(lengths: list[int], layout: TrainLayout, capacity: int) -> list[list[int]]:
    if layout.mode == "fixed":
        step = layout.rows_per_micro_batch
        return [list(range(i, min(i + step, len(lengths)))) for i in range(0, len(lengths), step)]
    if layout.mode == "dynamic":
        budget = max(layout.max_tokens, _round_up(max(lengths), layout.round_to))
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
        budget = max(layout.max_tokens, _round_up(max(lengths[i] for u in units for i in u), layout.round_to))

        def fits(mb: list[int]) -> bool:
            return len(mb) * _round_up(max(lengths[i] for i in mb), layout.round_to) <= budget

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


def _group_units(rows: Sequence[int], groups: Sequence[int]) -> list[list[int]]:
    """`rows` by group, the groups in the order they first appear, each group's rows in their order."""
    units: dict[int, list[int]] = {}
    for i in rows:
        units.setdefault(groups[i], []).append(i)
    return list(units.values())


def _plan_groups(
    lengths: list[int], groups: Sequence[int], layout: TrainLayout, dp_size: int, capacity: int
) -> list[list[list[int]]]:
    """`plan_micro_batches` with each group's rows together (see the module docstring)."""
    units = _group_units(range(len(lengths)), groups)
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


def _slots(lengths: list[int], layout: TrainLayout, capacity: int) -> int:
    if layout.mode == "packed":
        return len(pack_lengths(lengths, capacity)) * capacity
    width = max(lengths)
    if layout.mode == "dynamic":
        width = _round_up(width, layout.round_to)
    return len(lengths) * width


def _distinct_tokens(
    fields: dict[str, torch.Tensor], rows: torch.Tensor, layout: TrainLayout, capacity: int
) -> int:
    """Tokens one micro-batch's forward computes: its prefix tree's nodes (the trie the strategy builds from the
    same rows) where the strategy runs the tree (under share_prefix, where `trie_pays`), else every real token."""
    lengths = fields["attention_mask"][rows].sum(dim=1).tolist()
    if not layout.share_prefix:
        return int(sum(lengths))
    packed = capacity if layout.mode == "packed" else None
    pays, nodes = trie_pays(_real_tokens(fields, rows), packed, layout.pair_weight)
    return nodes if pays else int(sum(lengths))


def _real_tokens(fields: dict[str, torch.Tensor], rows: torch.Tensor) -> list[list[int]]:
    """Each row's ids without its padding."""
    ids, real = fields["input_ids"][rows], fields["attention_mask"][rows].bool()
    return [ids[k][real[k]].tolist() for k in range(len(rows))]


def prefix_order(fields: dict[str, torch.Tensor], rows: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """`rows` (one mini-batch) with each group's rows sorted by their real tokens, and the groups sorted by their
    first row: rows that start alike sit side by side, within a group (an episode's turns, the samples of one
    prompt) and across groups (one prompt drawn twice, one system turn), so a micro-batch computes what its rows
    share once. The mini-batch holds the same rows, so its gradient is the same."""
    tokens = _real_tokens(fields, rows)
    units = _group_units(range(len(rows)), groups[rows].tolist())
    order = sorted((sorted(unit, key=tokens.__getitem__) for unit in units), key=lambda u: tokens[u[0]])
    return rows[[k for unit in order for k in unit]]


def build_micro_batches(
    fields: dict[str, torch.Tensor],
    rows: torch.Tensor,
    layout: TrainLayout,
    agg_mode: str,
    ranks: int = 1,
    groups: torch.Tensor | None = None,
) -> tuple[list[list[dict[str, torch.Tensor]]], PaddingStats]:
    """The micro-batches of one mini-batch (`rows`: indices into the row tensors of `fields`), one list per
    data-parallel rank (`plan_micro_batches`), each trimmed to its width, with its `loss_scale` (its share of the
    whole mini-batch, all ranks together) and (packed) `pack_capacity`; and their padding counts. `groups` ([R]
    the group id of every row of `fields`) keeps each group together under `layout.share_prefix`.

    Every rank gets as many micro-batches: a rank short of them (fewer rows than the others can split into)
    runs copies of the mini-batch's first row with `loss_scale` 0, which add nothing to the gradient or the
    metrics."""
    if layout.share_prefix and groups is not None:
        rows = prefix_order(fields, rows, groups)
    lengths = fields["attention_mask"][rows].sum(dim=1).tolist()
    plans = plan_micro_batches(lengths, layout, ranks, None if groups is None else groups[rows].tolist())
    capacity = pack_capacity(lengths, layout)
    mask = fields["response_mask"][rows]
    units = mask.sum(dim=1) if agg_mode == "token-mean" else mask.any(dim=1).long()
    total = max(int(units.sum()), 1)
    stats = PaddingStats(
        real_tokens=int(sum(lengths)),
        naive_tokens=len(lengths) * max(lengths),
        micro_batches=sum(len(plan) for plan in plans),
    )
    target = max(len(plan) for plan in plans)

    def micro_batch(members: list[int], weight: float) -> dict[str, torch.Tensor]:
        sub = rows[members]
        width = max(lengths[i] for i in members)
        if layout.mode == "dynamic":
            width = min(_round_up(width, layout.round_to), fields["attention_mask"].shape[1])
        mb = {k: (v[sub][:, :width] if v.dim() == 2 else v[sub]) for k, v in fields.items()}
        mb["loss_scale"] = torch.tensor(weight)
        if layout.mode == "packed":
            mb["pack_capacity"] = torch.tensor(capacity)
        return mb

    out = []
    for plan in plans:
        mbs = [micro_batch(members, float(units[members].sum()) / total) for members in plan]
        stats.padded_tokens += sum(
            _slots([lengths[i] for i in members], layout, capacity) for members in plan
        )
        stats.distinct_tokens += sum(
            _distinct_tokens(fields, rows[members], layout, capacity) for members in plan
        )
        out.append(mbs + [micro_batch([0], 0.0) for _ in range(target - len(plan))])
    return out, stats
