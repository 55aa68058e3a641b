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
from dataclasses import dataclass
from typing import cast

import torch
from roll_algos import MicroBatch
from roll_strategies.compute.layout_cost import trie_pays

from roll_pipeline.trainer.micro_plan import (
    TrainLayout,
    group_units,
    micro_batch_slots,
    pack_capacity,
    plan_micro_batches,
    round_up,
)

__all__ = [
    "PaddingStats",
    "TrainLayout",
    "build_micro_batches",
    "group_mini_batches",
    "mini_batches",
    "plan_micro_batches",
    "prefix_order",
]


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


def _distinct_tokens(fields: MicroBatch, rows: torch.Tensor, layout: TrainLayout, capacity: int) -> int:
    """Tokens one micro-batch's forward computes: its prefix tree's nodes (the trie the strategy builds from the
    same rows) where the strategy runs the tree (under share_prefix, where `trie_pays`), else every real token."""
    lengths = fields["attention_mask"][rows].sum(dim=1).tolist()
    if not layout.share_prefix:
        return int(sum(lengths))
    packed = capacity if layout.mode == "packed" else None
    pays, nodes = trie_pays(_real_tokens(fields, rows), packed, layout.pair_weight)
    return nodes if pays else int(sum(lengths))


def _real_tokens(fields: MicroBatch, rows: torch.Tensor) -> list[list[int]]:
    """Each row's ids without its padding."""
    ids, real = fields["input_ids"][rows], fields["attention_mask"][rows].bool()
    return [ids[k][real[k]].tolist() for k in range(len(rows))]


def prefix_order(fields: MicroBatch, rows: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """`rows` (one mini-batch) with each group's rows sorted by their real tokens, and the groups sorted by their
    first row: rows that start alike sit side by side, within a group (an episode's turns, the samples of one
    prompt) and across groups (one prompt drawn twice, one system turn), so a micro-batch computes what its rows
    share once. The mini-batch holds the same rows, so its gradient is the same."""
    tokens = _real_tokens(fields, rows)
    units = group_units(range(len(rows)), groups[rows].tolist())
    order = sorted((sorted(unit, key=tokens.__getitem__) for unit in units), key=lambda u: tokens[u[0]])
    return rows[[k for unit in order for k in unit]]


def build_micro_batches(
    fields: MicroBatch,
    rows: torch.Tensor,
    layout: TrainLayout,
    agg_mode: str,
    ranks: int = 1,
    groups: torch.Tensor | None = None,
) -> tuple[list[list[MicroBatch]], PaddingStats]:
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

    def micro_batch(members: list[int], weight: float) -> MicroBatch:
        sub = rows[members]
        width = max(lengths[i] for i in members)
        if layout.mode == "dynamic":
            width = min(round_up(width, layout.round_to), fields["attention_mask"].shape[1])
        # every row tensor of `fields`, sliced: a MicroBatch of these rows
        mb = cast(MicroBatch, {k: (v[sub][:, :width] if v.dim() == 2 else v[sub]) for k, v in fields.items()})
        mb["loss_scale"] = torch.tensor(weight)
        if layout.mode == "packed":
            mb["pack_capacity"] = torch.tensor(capacity)
        return mb

    out = []
    for plan in plans:
        mbs = [micro_batch(members, float(units[members].sum()) / total) for members in plan]
        stats.padded_tokens += sum(
            micro_batch_slots([lengths[i] for i in members], layout, capacity) for members in plan
        )
        stats.distinct_tokens += sum(
            _distinct_tokens(fields, rows[members], layout, capacity) for members in plan
        )
        out.append(mbs + [micro_batch([0], 0.0) for _ in range(target - len(plan))])
    return out, stats
