"""One optimiser step over micro-batches: the loop every train strategy runs (hf_train, hf_critic, deepspeed_train).

`run_train_step(backend, micro_batches, loss_of, ...)`: per micro-batch, the strategy's forward and the
caller's loss (`loss_of`), weighted by the micro-batch's `loss_scale`, are back-propagated by a
`GradientBackend`; the weighted metrics are added up over the data-parallel ranks; the backend clips and steps
(or skips a non-finite step); the step is counted. What differs between strategies is the backend:
`master_weights.MasterWeightOptimizer` (AdamW over fp32 masters, gradients summed over the ranks) or
DeepSpeed's engine (`deepspeed_train`, ZeRO partitions and reduces the gradients itself).

Weights across ranks: a micro-batch's `loss_scale` is its share of the whole mini-batch, all ranks together
(e.g. its response tokens over the mini-batch's for a token-mean loss); the shares of all ranks sum to 1 and
the ranks' gradients are summed, so N ranks take exactly the step one rank takes on the same rows. Without a
`loss_scale` a micro-batch weighs 1 / (micro-batches on its rank x ranks).

Non-finite steps: a micro-batch whose loss is NaN or inf is not back-propagated (`GradientBackend.discard`);
a rank stops there unless its backend runs in lockstep (DeepSpeed with N ranks: ZeRO's collectives run inside
forward and backward, so every rank runs every micro-batch). Any rank's non-finite loss skips the step on all
ranks; a skipped step is counted (`NonFiniteCount`) and its metrics are reported as they are (NaN stays NaN).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.errors import StrategyError
from roll_strategies.train.data_parallel import DataParallel

__all__ = [
    "LAST_VALUE_METRICS",
    "GradientBackend",
    "LossOf",
    "NonFiniteCount",
    "StepOutcome",
    "StepSums",
    "run_train_step",
]

LAST_VALUE_METRICS = frozenset({"nonfinite_steps", "nonfinite_in_a_row", "overflow_steps", "grad_scale"})
"""Train-step metrics that are a running state, not a value of the step: a merge over steps keeps the last."""

LossOf = Callable[[MicroBatch], tuple[torch.Tensor, Mapping[str, float | torch.Tensor], torch.Tensor]]
"""loss_of(micro-batch on the device) -> (loss, metrics, outputs): the strategy's forward and the caller's loss;
`outputs` is the tensor with grad the loss was computed from (log-probs, values), for `GradientBackend.discard`."""


@dataclass
class NonFiniteCount:
    """Optimiser steps skipped for a non-finite loss or gradient norm: all of them, and the current run."""

    total: int = 0
    in_a_row: int = 0

    def record(self, skipped: bool) -> None:
        """Count one step (skipped or applied: an applied one ends the run of skipped ones)."""
        self.total += int(skipped)
        self.in_a_row = self.in_a_row + 1 if skipped else 0

    def metrics(self) -> dict[str, float]:
        """nonfinite_steps (cumulative) and nonfinite_in_a_row."""
        return {"nonfinite_steps": float(self.total), "nonfinite_in_a_row": float(self.in_a_row)}

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint keeps (so a resumed run keeps counting)."""
        return {"nonfinite_steps": self.total, "nonfinite_in_a_row": self.in_a_row}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore `state_dict` (zeros for checkpoints written before it was kept)."""
        self.total = int(state.get("nonfinite_steps", 0))  # type: ignore[call-overload]
        self.in_a_row = int(state.get("nonfinite_in_a_row", 0))  # type: ignore[call-overload]


@dataclass
class StepSums:
    """The weighted metrics of one optimiser step's micro-batches, and whether a loss was non-finite."""

    sums: dict[str, float] = field(default_factory=dict)
    total_weight: float = 0.0
    nonfinite_loss: bool = False
    micro_batches: int = 0

    pending: list[tuple[float, dict[str, float | torch.Tensor]]] = field(default_factory=list)
    """Micro-batches added with `add_later`, read by `resolve` in one transfer."""

    def add(self, weight: float, loss: torch.Tensor, metrics: Mapping[str, float | torch.Tensor]) -> bool:
        """Add one micro-batch's loss and metrics (weighted) now; False when its loss is NaN or inf."""
        return self._accumulate(
            weight, {"loss": float(loss.detach()), **{k: float(v) for k, v in metrics.items()}}
        )

    def add_later(
        self, weight: float, loss: torch.Tensor, metrics: Mapping[str, float | torch.Tensor]
    ) -> None:
        """Keep one micro-batch's loss and metrics (tensors stay on their device: no host sync) for `resolve`."""
        self.pending.append((weight, {"loss": loss.detach(), **metrics}))

    def resolve(self) -> None:
        """Add every `add_later` micro-batch: their tensor values reach the host in one transfer."""
        tensors = [v for _, values in self.pending for v in values.values() if isinstance(v, torch.Tensor)]
        host = iter(torch.stack([t.float().reshape(()) for t in tensors]).tolist() if tensors else [])
        for weight, values in self.pending:
            self._accumulate(
                weight, {k: next(host) if isinstance(v, torch.Tensor) else v for k, v in values.items()}
            )
        self.pending = []

    def _accumulate(self, weight: float, values: Mapping[str, float]) -> bool:
        self.total_weight += weight
        self.micro_batches += 1
        for key, item in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + weight * float(item)
        finite = math.isfinite(values["loss"])
        self.nonfinite_loss = self.nonfinite_loss or not finite
        return finite

    def merge(self, others: Sequence[StepSums]) -> StepSums:
        """The sums of several ranks' steps (in rank order) as one."""
        out = StepSums()
        for other in others:
            for key, value in other.sums.items():
                out.sums[key] = out.sums.get(key, 0.0) + value
            out.total_weight += other.total_weight
            out.nonfinite_loss = out.nonfinite_loss or other.nonfinite_loss
            out.micro_batches += other.micro_batches
        return out

    def means(self) -> dict[str, float]:
        """The weighted means (normalised by the weights seen): a NaN loss gives a NaN mean, as it should."""
        norm = self.total_weight or 1.0
        return {k: v / norm for k, v in self.sums.items()}


class StepOutcome(NamedTuple):
    """What a backend's `step` did."""

    grad_norm: float
    """Gradient 2-norm before clipping, over all ranks' summed gradients (NaN when no backward ran)."""
    lr: float
    """The learning rate the step used (or would have used)."""
    applied: bool
    """Whether the weights changed."""
    counted: bool = True
    """Whether the step counts for `NonFiniteCount` (an fp16 overflow the loss scale backs off from does not)."""
    extra: Mapping[str, float] = {}
    """Backend metrics (grad_scale, overflow_steps under fp16)."""


class GradientBackend(Protocol):
    """What `run_train_step` needs of an optimiser (gradients in, one step out)."""

    lockstep: bool
    """True when forward / backward run collectives (ZeRO with N ranks): every rank runs every micro-batch."""
    data_parallel: DataParallel
    """This rank's group: the metrics are added up over it."""
    nonfinite: NonFiniteCount
    """Where the skipped steps are counted."""

    def zero_grad(self) -> None:
        """Begin a step with no gradients."""
        ...

    def backward(self, loss: torch.Tensor, weight: float) -> None:
        """Back-propagate `loss * weight` into this step's gradients."""
        ...

    def discard(self, outputs: torch.Tensor) -> None:
        """A micro-batch's loss was not finite: make sure this step cannot be applied."""
        ...

    def step(self, lr_scale: float, nonfinite_loss: bool) -> StepOutcome:
        """Sum the ranks' gradients, clip and step (lr times `lr_scale`), or skip: `nonfinite_loss` (on any rank),
        or a non-finite gradient norm; then clear the gradients."""
        ...


def run_train_step(
    backend: GradientBackend,
    micro_batches: Sequence[MicroBatch],
    loss_of: LossOf,
    *,
    lr_scale: float,
    device: torch.device,
    defer_sync: bool = False,
) -> tuple[dict[str, float], bool]:
    """One optimiser step over this rank's `micro_batches` (see the module docstring).

    `defer_sync` (hf_train's default on CUDA; for a backend whose `step` alone skips a non-finite step, as
    `MasterWeightOptimizer`'s does, not one that must `discard`): no host sync between micro-batches. Losses
    and tensor metrics are read once after the last backward (`StepSums.resolve`), so a non-finite loss is
    back-propagated too and found then; the step is skipped all the same (the weights, moments and warm-up
    are untouched), but every micro-batch ran and its metrics count. Else each loss is read before its
    backward and the loop stops at a non-finite one.

    Returns (metrics, applied): the micro-batches' weighted metric means over all ranks, plus grad_norm, lr,
    the non-finite counters and the backend's extras; and whether the weights changed."""
    if not (math.isfinite(lr_scale) and lr_scale >= 0.0):
        raise StrategyError(
            f"Expected a finite lr_scale >= 0, got {lr_scale}; it multiplies the scheduled lr (a decay factor,"
            " or a phase's rate over the configured one)."
        )
    data_parallel, count = backend.data_parallel, len(micro_batches)
    if backend.lockstep:
        data_parallel.check_same(count, "number of micro-batches")
    if count == 0 and data_parallel.size == 1:
        raise StrategyError("Expected at least one micro-batch in train_step, got none.")
    default_weight = 1.0 / (max(count, 1) * data_parallel.size)
    backend.zero_grad()
    sums = StepSums()
    for raw in micro_batches:
        mb = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}
        weight = float(raw.get("loss_scale", default_weight))  # read on the host, before the copy
        loss, metrics, outputs = loss_of(mb)
        if defer_sync:
            sums.add_later(weight, loss, metrics)
            backend.backward(loss, weight)
            continue
        if sums.add(weight, loss, metrics):
            backend.backward(loss, weight)
            continue
        backend.discard(outputs)
        if not backend.lockstep:
            break  # the step is lost whatever the remaining micro-batches hold
    sums.resolve()
    sums = sums.merge(data_parallel.all_gather(sums))
    if sums.micro_batches == 0:
        raise StrategyError(
            f"Expected at least one micro-batch in train_step on some rank, got none on all {data_parallel.size}."
        )
    outcome = backend.step(lr_scale, sums.nonfinite_loss)
    if outcome.counted:
        backend.nonfinite.record(skipped=not outcome.applied)
    grad_norm = math.nan if sums.nonfinite_loss else outcome.grad_norm
    metrics_out = {**sums.means(), "grad_norm": grad_norm, "lr": outcome.lr, **backend.nonfinite.metrics()}
    return {**metrics_out, **outcome.extra}, outcome.applied
