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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from roll_algos import balance_partitions, dynamic_micro_batches
from roll_algos.packing import pack_lengths

from roll_pipeline.config.roles import WorkerConfig

__all__ = [
    "BatchingMode",
    "PaddingStats",
    "TrainLayout",
    "build_micro_batches",
    "mini_batches",
    "plan_micro_batches",
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

    @classmethod
    def of(cls, role: WorkerConfig, packing_ok: bool = True) -> TrainLayout:
        """The layout of a role's config; packing falls back to dynamic batching when the model cannot pack."""
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
        )


@dataclass
class PaddingStats:
    """Token slots of the micro-batches run in a step, against padding every mini-batch to its longest row."""

    real_tokens: int = 0
    padded_tokens: int = 0
    naive_tokens: int = 0
    seconds: float = 0.0
    micro_batches: int = 0

    def add(self, other: PaddingStats) -> None:
        """Accumulate another mini-batch's counts."""
        self.real_tokens += other.real_tokens
        self.padded_tokens += other.padded_tokens
        self.naive_tokens += other.naive_tokens
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
        }


def mini_batches(order: torch.Tensor, max_rows: int) -> list[torch.Tensor]:
    """Split row indices into the fewest mini-batches of at most `max_rows`, as equal as possible.

    Why equal: every mini-batch gets a full optimiser step, and Adam's step size does not shrink with
    the batch, so a remainder of a few rows would be one noisy full-size step per rollout.
    """
    count = max(1, -(-len(order) // max_rows))
    return [chunk for chunk in torch.tensor_split(order, count) if len(chunk)]


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


def _equalise(plans: list[list[list[int]]]) -> list[list[list[int]]]:
    """Split the largest micro-batches of the ranks with fewer, so every rank runs as many (a split never
    exceeds the budget); ranks step their optimiser together."""
    target = max(len(p) for p in plans)
    for plan in plans:
        while len(plan) < target and any(len(mb) > 1 for mb in plan):
            big = max(range(len(plan)), key=lambda k: len(plan[k]))
            mb = plan.pop(big)
            plan[big:big] = [mb[: len(mb) // 2], mb[len(mb) // 2 :]]
    return plans


def plan_micro_batches(lengths: list[int], layout: TrainLayout, dp_size: int = 1) -> list[list[list[int]]]:
    """Per data-parallel rank, the micro-batches (lists of indices into `lengths`) of one mini-batch; packed
    rows have the whole mini-batch's capacity on every rank. A rank may get fewer micro-batches than another
    only when it has too few rows to split (`build_micro_batches` pads it)."""
    capacity = pack_capacity(lengths, layout)
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


def build_micro_batches(
    fields: dict[str, torch.Tensor],
    rows: torch.Tensor,
    layout: TrainLayout,
    agg_mode: str,
    ranks: int = 1,
) -> tuple[list[list[dict[str, torch.Tensor]]], PaddingStats]:
    """The micro-batches of one mini-batch (`rows`: indices into the row tensors of `fields`), one list per
    data-parallel rank (`plan_micro_batches`), each trimmed to its width, with its `loss_scale` (its share of the
    whole mini-batch, all ranks together) and (packed) `pack_capacity`; and their padding counts.

    Every rank gets as many micro-batches: a rank short of them (fewer rows than the others can split into)
    runs copies of the mini-batch's first row with `loss_scale` 0, which add nothing to the gradient or the
    metrics."""
    lengths = fields["attention_mask"][rows].sum(dim=1).tolist()
    plans = plan_micro_batches(lengths, layout, ranks)
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
        out.append(mbs + [micro_batch([0], 0.0) for _ in range(target - len(plan))])
    return out, stats
