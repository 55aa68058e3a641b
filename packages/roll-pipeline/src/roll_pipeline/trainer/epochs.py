"""The update loop of a trained role (actor and critic alike): `ppo_epochs` passes over the step's rows, each
shuffled into mini-batches of whole groups where the rows' groups are known (`micro_batches.group_mini_batches`,
`share_prefix` or not: the switch changes only how a micro-batch is computed, never which rows an optimiser step
trains), else of rows (`mini_batches`), each mini-batch cut into micro-batches, one list per data-parallel rank
(`micro_batches.build_micro_batches`), and run as one optimiser step by the ranks'
`train_step` (`RankGroup.train_step`); then the steps' metrics merged into one value per key and the padding
counts of the micro-batches run.

The mini-batch order is drawn from a generator seeded with `seed * salt + step` (`UpdateSchedule`: each role
its own salt), and the learning rate decays over the run with the role's `lr_scheduler_type`.

A train step with a NaN/inf loss or gradient norm is skipped by the worker, which counts it
(`nonfinite_steps`, cumulative, and `nonfinite_in_a_row`, both kept in its checkpoint); its metrics are merged
as they are (a NaN loss makes the step's mean loss NaN). `check_nonfinite` stops the run with
`NonFiniteStepsError` once `max_consecutive_nonfinite_steps` optimiser steps in a row were skipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from roll_algos import MicroBatch
from roll_strategies import LAST_VALUE_METRICS, lr_decay_factor

from roll_pipeline.observe.metrics import mean
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.micro_batches import (
    PaddingStats,
    TrainLayout,
    build_micro_batches,
    group_mini_batches,
    mini_batches,
)

__all__ = [
    "NonFiniteStepsError",
    "UpdateSchedule",
    "check_nonfinite",
    "first_nonfinite",
    "merge_metrics",
    "train_epochs",
]


class NonFiniteStepsError(RuntimeError):
    """Too many optimiser steps in a row were skipped for a NaN/inf loss or gradient norm."""


@dataclass(frozen=True)
class UpdateSchedule:
    """How a trained role's update runs over the steps of a run (`assembly.settings.update_schedule`)."""

    ppo_epochs: int  # passes over each step's rows
    seed: int  # the run's seed, of the mini-batch order
    salt: int  # the role's multiplier of the seed: the order of step s is drawn with seed * salt + s
    max_steps: int  # training steps of the run, the horizon of the learning-rate decay
    lr_scheduler_type: str  # the role's learning-rate decay over the run: constant, linear or cosine
    min_lr_ratio: float  # the role's final learning rate as a fraction of the initial one
    max_consecutive_nonfinite_steps: int = 5  # skipped non-finite steps in a row before the run stops
    # multiplies the role's learning rate: a demonstration step's rate over the RL one
    lr_factor: float = 1.0

    def generator(self, step: int) -> torch.Generator:
        """The generator of step `step`'s mini-batch order."""
        return torch.Generator().manual_seed(self.seed * self.salt + step)

    def lr_scale(self, step: int) -> float:
        """The learning-rate factor of step `step`: `lr_factor` times the decay."""
        decay = lr_decay_factor(self.lr_scheduler_type, step / max(self.max_steps, 1), self.min_lr_ratio)
        return self.lr_factor * decay


def merge_metrics(collected: Sequence[dict[str, float]], prefix: str) -> dict[str, float]:
    """The mean of each key of the last train step over the train steps that report it (the last value for a
    running count or state, `LAST_VALUE_METRICS`), a bare key (`loss`, `grad_norm`, `lr`) named
    `{prefix}/{key}`. A NaN stays NaN."""
    merged = {
        k: collected[-1][k] if k in LAST_VALUE_METRICS else mean([m[k] for m in collected if k in m])
        for k in collected[-1]
    }
    return {(k if "/" in k else f"{prefix}/{k}"): v for k, v in merged.items()}


def first_nonfinite(metrics: Mapping[str, float]) -> str:
    """The first non-finite quantity of a train step's metrics as `name=value`: the loss, then the terms the loss
    function reported, then the gradient norm (with the others that are non-finite too); "" when none is."""
    terms = [k for k in metrics if k not in ("loss", "grad_norm", "lr") and k not in LAST_VALUE_METRICS]
    bad = [k for k in ("loss", *terms, "grad_norm") if k in metrics and not math.isfinite(metrics[k])]
    if not bad:
        return ""
    also = f" (non-finite too: {', '.join(bad[1:])})" if len(bad) > 1 else ""
    return f"{bad[0]}={metrics[bad[0]]}{also}"


def check_nonfinite(metrics: Mapping[str, float], limit: int, *, prefix: str, step: int, update: int) -> None:
    """Raise `NonFiniteStepsError` when the train step that returned `metrics` made `limit` skipped non-finite
    optimiser steps in a row (the worker's `nonfinite_in_a_row`, which spans pipeline steps and resumes).
    `step` is the pipeline step as the metrics number it (from 1), `update` the optimiser step's index in it."""
    in_a_row = int(metrics.get("nonfinite_in_a_row", 0.0))
    if in_a_row < limit:
        return
    raise NonFiniteStepsError(
        f"{prefix}: {in_a_row} optimiser steps in a row were skipped for a non-finite loss or gradient norm "
        f"(limit max_consecutive_nonfinite_steps={limit}); the last one, optimiser step {update} of step {step}, "
        f"had {first_nonfinite(metrics) or 'no non-finite metric (a non-finite gradient norm)'}. Nothing was "
        "trained on them. Look for NaN/inf in the step's data (rewards, advantages, log-probs) or a too high "
        "learning rate; resume from the last checkpoint once fixed."
    )


async def train_epochs(
    group: RankGroup,
    loss_fn: Any,
    fields: MicroBatch,
    layout: TrainLayout,
    schedule: UpdateSchedule,
    step: int,
    *,
    agg_mode: str,
    prefix: str,
    groups: torch.Tensor | None = None,
    **step_kwargs: Any,
) -> tuple[dict[str, float], float]:
    """Update the role's ranks `group` on the rows of `fields` at step `step` (see the module docstring); returns
    its metrics
    (`merge_metrics` and `PaddingStats.metrics` under `prefix`) and the seconds of the loop.

    `agg_mode` weights the micro-batches (`build_micro_batches`); `groups` ([R] the group id of each row) keeps
    each group's rows in one mini-batch (`group_mini_batches`), and under `layout.share_prefix` in one
    micro-batch where it fits; `step_kwargs` go to every
    `train_step` (e.g. `with_entropy`). Raises `NonFiniteStepsError` after too many non-finite steps
    (`check_nonfinite`)."""
    lr_scale = schedule.lr_scale(step)
    generator = schedule.generator(step)
    collected: list[dict[str, float]] = []
    stats = PaddingStats()
    rows = int(fields["input_ids"].shape[0])
    t0 = time.perf_counter()
    for _ in range(schedule.ppo_epochs):
        if groups is not None:
            batches = group_mini_batches(groups, layout.rows_per_mini_batch, generator)
        else:
            batches = mini_batches(torch.randperm(rows, generator=generator), layout.rows_per_mini_batch)
        for idx in batches:
            per_rank, mb_stats = build_micro_batches(fields, idx, layout, agg_mode, group.size, groups)
            t = time.perf_counter()
            collected.append(await group.train_step(per_rank, loss_fn, **step_kwargs, lr_scale=lr_scale))
            check_nonfinite(
                collected[-1],
                schedule.max_consecutive_nonfinite_steps,
                prefix=prefix,
                step=step + 1,
                update=len(collected),
            )
            mb_stats.seconds = time.perf_counter() - t
            stats.add(mb_stats)
            stats.seconds += mb_stats.seconds
    seconds = time.perf_counter() - t0
    # how many optimiser steps the rows made: a batch smaller than one mini-batch makes one a pass
    steps = {f"{prefix}/optimizer_steps": float(len(collected))}
    return {**merge_metrics(collected, prefix), **stats.metrics(prefix), **steps}, seconds
