"""`OptimizerSettings`: the optimiser arguments every train strategy takes (hf_train, hf_critic, deepspeed_train).

One frozen dataclass instead of the same six keyword arguments on each constructor. It holds plain numbers
only, so it pickles as it travels to a rank's process (Ray, or a child process) with the worker's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OptimizerSettings"]


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW with a linear learning-rate warm-up and gradient-norm clipping, as every train strategy runs it.

    >>> OptimizerSettings(learning_rate=1e-5, warmup_steps=10).betas
    (0.9, 0.999)
    """

    learning_rate: float = 1e-4
    """AdamW's learning rate once warmed up (the pipeline's decay multiplies it per step: `lr_scale`)."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's (beta1, beta2)."""
    eps: float = 1e-8
    """AdamW's epsilon."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this total 2-norm before each step (DeepSpeed: `gradient_clipping: auto`)."""
    warmup_steps: int = 0
    """The learning rate rises linearly over this many applied optimiser steps; 0: no warm-up."""
