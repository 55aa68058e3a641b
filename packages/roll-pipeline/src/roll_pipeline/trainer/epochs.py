"""The update loop of a trained role (actor and critic alike): `ppo_epochs` passes over the step's rows, each
shuffled into mini-batches (`micro_batches.mini_batches`), each mini-batch cut into micro-batches
(`micro_batches.build_micro_batches`) and run as one optimiser step by the worker's `train_step`; then the
steps' metrics merged into one value per key and the padding counts of the micro-batches run.

The mini-batch order is drawn from a generator seeded with `seed * salt + step` (`UpdateSchedule`: each role
its own salt), and the learning rate decays over the run with the role's `lr_scheduler_type`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from roll_strategies import lr_decay_factor

from roll_pipeline.observe.metrics import mean
from roll_pipeline.runtime.cluster import Cluster
from roll_pipeline.trainer.micro_batches import PaddingStats, TrainLayout, build_micro_batches, mini_batches

__all__ = ["UpdateSchedule", "merge_metrics", "train_epochs"]


@dataclass(frozen=True)
class UpdateSchedule:
    """How a trained role's update runs over the steps of a run (`trainer.settings.update_schedule`)."""

    ppo_epochs: int  # passes over each step's rows
    seed: int  # the run's seed, of the mini-batch order
    salt: int  # the role's multiplier of the seed: the order of step s is drawn with seed * salt + s
    max_steps: int  # training steps of the run, the horizon of the learning-rate decay
    lr_scheduler_type: str  # the role's learning-rate decay over the run: constant, linear or cosine
    min_lr_ratio: float  # the role's final learning rate as a fraction of the initial one

    def generator(self, step: int) -> torch.Generator:
        """The generator of step `step`'s mini-batch order."""
        return torch.Generator().manual_seed(self.seed * self.salt + step)

    def lr_scale(self, step: int) -> float:
        """The learning-rate factor of step `step`."""
        return lr_decay_factor(self.lr_scheduler_type, step / max(self.max_steps, 1), self.min_lr_ratio)


def merge_metrics(collected: Sequence[dict[str, float]], prefix: str) -> dict[str, float]:
    """The mean of each key of the last train step over the train steps that report it, a bare key (`loss`,
    `grad_norm`, `lr`) named `{prefix}/{key}`."""
    merged = {k: mean([m[k] for m in collected if k in m]) for k in collected[-1]}
    return {(k if "/" in k else f"{prefix}/{k}"): v for k, v in merged.items()}


async def train_epochs(
    cluster: Cluster,
    worker: Any,
    loss_fn: Any,
    fields: dict[str, torch.Tensor],
    layout: TrainLayout,
    schedule: UpdateSchedule,
    step: int,
    *,
    agg_mode: str,
    prefix: str,
    full: dict[str, torch.Tensor] | None = None,
    **step_kwargs: Any,
) -> tuple[dict[str, float], float]:
    """Update `worker` on the rows of `fields` at step `step` (see the module docstring); returns its metrics
    (`merge_metrics` and `PaddingStats.metrics` under `prefix`) and the seconds of the loop.

    `agg_mode` weights the micro-batches (`build_micro_batches`); `full` holds [M, V] tensors over the
    response positions; `step_kwargs` go to every `train_step` (e.g. `with_entropy`)."""
    lr_scale = schedule.lr_scale(step)
    generator = schedule.generator(step)
    collected: list[dict[str, float]] = []
    stats = PaddingStats()
    rows = int(fields["input_ids"].shape[0])
    t0 = time.perf_counter()
    for _ in range(schedule.ppo_epochs):
        order = torch.randperm(rows, generator=generator)
        for idx in mini_batches(order, layout.rows_per_mini_batch):
            mbs, mb_stats = build_micro_batches(fields, idx, layout, agg_mode, full)
            t = time.perf_counter()
            collected.append(
                await cluster.call(worker, "train_step", mbs, loss_fn, **step_kwargs, lr_scale=lr_scale)
            )
            mb_stats.seconds = time.perf_counter() - t
            stats.add(mb_stats)
            stats.seconds += mb_stats.seconds
    seconds = time.perf_counter() - t0
    return {**merge_metrics(collected, prefix), **stats.metrics(prefix)}, seconds
