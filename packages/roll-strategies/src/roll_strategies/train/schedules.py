"""Learning-rate decay over a run, as a multiplier of the optimiser's (warmed-up) learning rate.

The caller owns the notion of progress (the pipeline uses pipeline steps / max_steps, which stays
exact when the number of optimiser steps per rollout varies) and passes the factor to `train_step`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Literal

import torch

from roll_strategies.errors import StrategyError
from roll_strategies.train.optimizer import OptimizerSettings

__all__ = ["LrDecay", "adamw_with_warmup", "apply_lr_scale", "lr_decay_factor", "warmup_factor"]

LrDecay = Literal["constant", "linear", "cosine"]
FUSED_ADAMW_DEVICES = ("cpu", "cuda")
"""Device types whose parameters AdamW steps with torch's fused kernel (`adamw_with_warmup`)."""


def lr_decay_factor(kind: LrDecay, progress: float, min_ratio: float = 0.0) -> float:
    """Multiplier in [min_ratio, 1] at `progress` in [0, 1] of the run (1 at the start for every kind)."""
    if not 0.0 <= min_ratio <= 1.0:
        raise StrategyError(f"Expected min_ratio in [0, 1], got {min_ratio}.")
    progress = min(max(progress, 0.0), 1.0)
    if kind == "constant":
        return 1.0
    if kind == "linear":
        shape = 1.0 - progress
    elif kind == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise StrategyError(f"Expected an lr decay of 'constant', 'linear' or 'cosine', got {kind!r}.")
    return min_ratio + (1.0 - min_ratio) * shape


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up of the optimiser's lr: min(1, (step + 1) / warmup_steps) at optimiser step `step`; 1 without."""
    return min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0


def adamw_with_warmup(
    parameters: Iterable[torch.nn.Parameter], settings: OptimizerSettings
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """The optimiser every training strategy uses: AdamW and a LambdaLR of `warmup_factor`, from `settings`
    (its `max_grad_norm` is the caller's: clipping happens outside the optimiser).

    AdamW runs torch's fused kernel where every parameter is a floating tensor on the CPU or CUDA: one pass
    over each tensor instead of about ten (SmolLM2's 134.5M float32 masters on one CPU thread: 0.08 s a step
    against 0.47 s, benchmarks/adamw_step.py), the same update up to float rounding."""
    parameters = list(parameters)
    fused = bool(parameters) and all(
        p.device.type in FUSED_ADAMW_DEVICES and p.is_floating_point() for p in parameters
    )
    optimizer = torch.optim.AdamW(
        parameters,
        lr=settings.learning_rate,
        weight_decay=settings.weight_decay,
        betas=tuple(settings.betas),
        eps=settings.eps,
        fused=fused or None,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(warmup_factor, warmup_steps=settings.warmup_steps)
    )
    return optimizer, schedule


def apply_lr_scale(optimizer: torch.optim.Optimizer, lr_scale: float) -> float:
    """Multiply this optimiser step's lr by `lr_scale` (the run's decay factor, times a phase's rate over the
    configured one); returns the lr the step uses.

    The warm-up scheduler's next `step()` sets lr from its base again, so the scale lasts one step.
    """
    for group in optimizer.param_groups:
        group["lr"] *= lr_scale
    return float(optimizer.param_groups[0]["lr"])
