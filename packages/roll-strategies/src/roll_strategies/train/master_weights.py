"""The gradient backend of the Hugging Face train strategies (`hf_train`, `hf_critic`): fp32 master weights,
AdamW with linear warm-up, grad-norm clipping, fp16 dynamic loss scaling, skipping non-finite steps, and the
sum of the gradients over data-parallel ranks. The loop around it is `train_loop.run_train_step`.

Mixed precision (as DeepSpeed's bf16 / fp16 optimisers do): the model computes in its own dtype; every
parameter that is not float32 gets a float32 master copy, which AdamW steps (its moments are float32
too). After each micro-batch's backward the low-precision gradients are added into float32 gradients of
the masters (accumulation across micro-batches is float32), the step clips and updates the masters, and
the model's weights are then set from them (rounded to the model's dtype). An update far below the
resolution of bf16 (lr 1e-6 on weights of size 1e-2) accumulates in the masters instead of vanishing. A
float32 parameter is its own master: no copy, no memory, the plain AdamW step. float16 adds dynamic loss
scaling (`LossScaler`).

Data parallelism: with N ranks every rank holds all weights and optimiser state; at the step the masters'
float32 gradients are summed over the ranks (`DataParallel.sum_gradients`) before the norm, so the norm,
the clip, an fp16 overflow and the update are the same on every rank and equal to one rank's on all rows.

Non-finite steps: a micro-batch whose loss is NaN or inf is not back-propagated, and a step whose
gradient norm is not finite is not applied. A skipped step leaves the weights, the AdamW moments and the
warm-up position (the scheduler counts applied updates, as DeepSpeed's does on an overflow) unchanged; it
is counted (`nonfinite_steps`, cumulative; `nonfinite_in_a_row`, reset by the next applied step) and its
metrics are reported as they are (a NaN loss stays NaN). An fp16 overflow the loss scale can still back
off from is not a non-finite step: it is skipped, the scale halves and `overflow_steps` counts it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from roll_strategies.errors import CheckpointError, StrategyError
from roll_strategies.sync.weights import load_named_weights, unique_named_tensors
from roll_strategies.train.data_parallel import DataParallel
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.schedules import adamw_with_warmup, apply_lr_scale
from roll_strategies.train.train_loop import NonFiniteCount, StepOutcome

__all__ = ["LossScaler", "MasterWeightOptimizer"]


@dataclass
class LossScaler:
    """fp16 dynamic loss scaling (the scheme of torch.amp.GradScaler and DeepSpeed's fp16 optimiser).

    The loss is multiplied by `scale` before backward so that small gradients do not underflow float16
    (whose smallest subnormal is 6e-8); the gradients are divided by it in float32 before the step. A step
    whose gradients overflow is skipped and the scale halves (not below `min_scale`); after
    `growth_interval` applied steps in a row it doubles.
    """

    scale: float = 2.0**16
    growth_interval: int = 2000
    min_scale: float = 1.0
    good_steps: int = 0
    overflows: int = 0

    def can_back_off(self) -> bool:
        """Whether an overflow can still be blamed on the scale (it is above its minimum)."""
        return self.scale > self.min_scale

    def update(self, overflow: bool) -> None:
        """After a step: halve on an overflow, double after `growth_interval` good steps."""
        if overflow:
            self.scale = max(self.scale / 2.0, self.min_scale)
            self.good_steps = 0
            self.overflows += 1
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= 2.0
            self.good_steps = 0

    def state_dict(self) -> dict[str, float]:
        """Scale and counters, for a checkpoint."""
        return {"scale": self.scale, "good_steps": self.good_steps, "overflows": self.overflows}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore `state_dict`."""
        self.scale = float(state["scale"])
        self.good_steps = int(state["good_steps"])
        self.overflows = int(state["overflows"])


FOLD_CHUNK = 1 << 20
"""Elements per in-place add when a CPU gradient is folded into its float32 master gradient."""


def fold_gradient(master_grad: torch.Tensor, grad: torch.Tensor) -> None:
    """master_grad += grad upcast to float32, exactly, in place. On the CPU in chunks of FOLD_CHUNK elements:
    a whole large tensor's upcast goes through a temporary of its size (SmolLM2's 28M-element embedding: 113
    MB of fresh pages at every micro-batch; `benchmarks/gradient_fold.py` measures the two side by side)."""
    chunkable = master_grad.is_contiguous() and grad.is_contiguous()
    if grad.device.type != "cpu" or grad.numel() <= FOLD_CHUNK or not chunkable:
        master_grad.add_(grad)
        return
    dst, src = master_grad.view(-1), grad.view(-1)
    for start in range(0, dst.numel(), FOLD_CHUNK):
        dst[start : start + FOLD_CHUNK].add_(src[start : start + FOLD_CHUNK])


class MasterWeightOptimizer:
    """AdamW (+ warm-up, clipping, loss scaling) over fp32 masters of `model`'s trainable parameters; a
    `train_loop.GradientBackend` (`zero_grad`, `backward` per micro-batch, `step`)."""

    lockstep = False  # backward runs no collective: a rank may stop early or have fewer micro-batches

    def __init__(
        self,
        model: nn.Module,
        settings: OptimizerSettings,
        *,
        data_parallel: DataParallel | None = None,
    ) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise StrategyError(
                f"Expected trainable parameters in {type(model).__name__}, found none; build the strategy "
                "from a model whose parameters require grad (or with trainable=False for a reference)."
            )
        # float32 parameters are their own masters; others get a float32 copy on the same device
        self.masters = [p if p.dtype == torch.float32 else p.detach().float() for p in self.params]
        self._master_of = {id(p): m for p, m in zip(self.params, self.masters, strict=True)}
        self.has_copies = any(m is not p for p, m in zip(self.params, self.masters, strict=True))
        fp16 = any(p.dtype == torch.float16 for p in self.params)
        self.scaler: LossScaler | None = LossScaler() if fp16 else None
        self.max_grad_norm = settings.max_grad_norm
        self.data_parallel = data_parallel or DataParallel(0, 1, self.params[0].device)
        self.nonfinite = NonFiniteCount()
        self.optimizer, self.scheduler = adamw_with_warmup(self.masters, settings)

    def _pairs(self) -> Iterator[tuple[nn.Parameter, torch.Tensor]]:
        return zip(self.params, self.masters, strict=True)

    def zero_grad(self) -> None:
        """No gradients, on the model or the masters."""
        for p, m in self._pairs():
            p.grad = None
            m.grad = None

    def backward(self, loss: torch.Tensor, weight: float) -> None:
        """Back-propagate `loss * weight` (times the fp16 loss scale) into the masters' float32 gradients."""
        scale = self.scaler.scale if self.scaler is not None else 1.0
        (loss.float() * (weight * scale)).backward()  # float32: a scaled fp16/bf16 loss could overflow
        if self.has_copies:  # fold now: float32 accumulation, and the low-precision grads are freed
            for p, m in self._pairs():
                if m is not p and p.grad is not None:
                    if m.grad is None:
                        m.grad = p.grad.float()
                    else:
                        fold_gradient(m.grad, p.grad)
                    p.grad = None

    def discard(self, outputs: torch.Tensor) -> None:
        """A non-finite loss is simply not back-propagated: `step` is told and skips."""

    def step(self, lr_scale: float, nonfinite_loss: bool) -> StepOutcome:
        """Sum the gradients over the ranks, clip, step the masters and set the model from them, unless the
        step is non-finite (then nothing changes but the counters the loop keeps). The outcome's extras, for
        fp16: grad_scale (the scale this step's backward used) and overflow_steps."""
        lr = float(self.optimizer.param_groups[0]["lr"]) * lr_scale
        scale = self.scaler.scale if self.scaler is not None else 1.0
        overflow = applied = False
        grad_norm = math.nan
        if not nonfinite_loss:
            self.data_parallel.sum_gradients(self.masters)
            grads = [m.grad for m in self.masters if m.grad is not None]
            for grad in grads if scale != 1.0 else ():
                grad.mul_(1.0 / scale)
            norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
            grad_norm = float(norm)
            if not math.isfinite(grad_norm):  # an fp16 overflow is the scale's fault while it can back off
                overflow = self.scaler is not None and self.scaler.can_back_off()
            else:
                torch.nn.utils.clip_grads_with_norm_(self.masters, self.max_grad_norm, norm)
                apply_lr_scale(self.optimizer, lr_scale)
                self.optimizer.step()
                self.scheduler.step()
                self._copy_masters_to_model()
                applied = True
        self.zero_grad()
        if self.scaler is not None and not nonfinite_loss:  # no backward ran on a non-finite loss
            self.scaler.update(overflow)
        extra = (
            {}
            if self.scaler is None
            else {"grad_scale": scale, "overflow_steps": float(self.scaler.overflows)}
        )
        return StepOutcome(grad_norm, lr, applied, counted=not overflow, extra=extra)

    @torch.no_grad()
    def _copy_masters_to_model(self) -> None:
        for p, m in self._pairs():
            if m is not p:
                p.copy_(m)

    def named_weights(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """`model`'s state-dict entries (a tied one once) with each trainable parameter replaced by its
        float32 master: what checkpoints and weight sync read."""
        return {n: self._master_of.get(id(t), t) for n, t in unique_named_tensors(model).items()}

    @torch.no_grad()
    def load_weights(self, model: nn.Module, named: Mapping[str, torch.Tensor]) -> None:
        """Load `named` into `model` (strictly, cast to its dtype) and exactly into the masters."""
        load_named_weights(model, named)
        for name, tensor in unique_named_tensors(model).items():
            master = self._master_of.get(id(tensor))
            if master is not None and master is not tensor:
                master.copy_(named[name].to(device=master.device, dtype=torch.float32))

    def state_dict(self) -> dict[str, object]:
        """Optimiser, scheduler, loss scaler and non-finite counters (the masters are the weights file)."""
        state: dict[str, object] = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            **self.nonfinite.state_dict(),
        }
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, object], source: object) -> None:
        """Restore `state_dict` (read from `source`, named in errors)."""
        if "optimizer" not in state or "scheduler" not in state:
            raise CheckpointError(
                f"Expected optimizer state in {source} (a trainable checkpoint), got a reference-model "
                "checkpoint; load it with trainable=False."
            )
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self.scheduler.load_state_dict(state["scheduler"])  # type: ignore[arg-type]
        self.nonfinite.load_state_dict(state)
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])  # type: ignore[arg-type]
