"""Trainer offload: a train strategy's tensors moved off its device while a colocated inference engine samples.

`offload_tensors` moves parameters, their gradients, the fp32 master copies and the optimiser state (AdamW's
moments) to CPU memory and `reload_tensors` moves them back, each by swapping the tensor's `.data`, so every
reference to a parameter (the optimiser's, the masters map's, a tied weight's) stays valid. From a CUDA device
the CPU copies are pinned. On the CPU the same path copies each tensor into a fresh CPU buffer (and back), so a
test on the CPU runs the real swap; its report counts those bytes, and `gpu_freed_bytes` is 0 there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "OffloadReport",
    "TrainStateOffload",
    "allocated_bytes",
    "offload_tensors",
    "optimizer_state_tensors",
    "reload_tensors",
]


@dataclass(frozen=True)
class OffloadReport:
    """What one `offload` or `reload` did on one rank."""

    seconds: float
    """Wall time of the move (synchronised on CUDA)."""
    bytes_moved: int
    """Bytes of the tensors copied (0 when they were already where asked)."""
    gpu_freed_bytes: int = 0
    """torch.cuda.memory_allocated before minus after (negative for a reload; 0 on the CPU)."""

    def __add__(self, other: OffloadReport) -> OffloadReport:
        return OffloadReport(
            self.seconds + other.seconds,
            self.bytes_moved + other.bytes_moved,
            self.gpu_freed_bytes + other.gpu_freed_bytes,
        )


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """The tensors of `optimizer.state` (AdamW: exp_avg, exp_avg_sq, step), each once."""
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


def _unique(tensors: Iterable[torch.Tensor | None]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _move(tensors: Iterable[torch.Tensor | None], device: torch.device, *, pin: bool) -> int:
    """Swap each tensor's `.data` for a copy on `device`; returns the bytes copied. A tensor already on a CUDA
    `device` stays; on the CPU every tensor is copied (see the module docstring)."""
    moved = 0
    for t in _unique(tensors):
        if device.type != "cpu" and t.device == device:
            continue
        if device.type == "cpu" and t.device.type != "cpu" and pin:
            copy = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            copy.copy_(t.data, non_blocking=True)
        elif t.device.type == "cpu" and device.type != "cpu":
            copy = t.data.to(device, non_blocking=t.data.is_pinned())
        else:
            copy = t.data.to(device, copy=True)
        t.data = copy
        moved += t.numel() * t.element_size()
    return moved


def allocated_bytes(device: torch.device) -> int:
    """Bytes torch holds allocated on a CUDA `device` now (synchronised first); 0 on other devices."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return int(torch.cuda.memory_allocated(device))


def _swap(tensors: list[torch.Tensor], target: torch.device, home: torch.device) -> OffloadReport:
    started, before = time.perf_counter(), allocated_bytes(home)
    moved = _move(tensors, target, pin=home.type == "cuda")
    after = allocated_bytes(home)
    return OffloadReport(time.perf_counter() - started, moved, before - after)


def _state(
    model: torch.nn.Module, masters: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer | None
) -> list[torch.Tensor]:
    """Everything a trainer keeps on its device: the model's parameters and buffers, their gradients, the
    masters and theirs, the optimiser state (gradients are read now: they are None between steps)."""
    params = list(model.parameters())
    masters = list(masters)
    tensors: list[torch.Tensor | None] = [*params, *model.buffers(), *masters]
    tensors += [p.grad for p in params] + [m.grad for m in masters]
    if optimizer is not None:
        tensors += list(optimizer_state_tensors(optimizer))
    return _unique(tensors)


def offload_tensors(
    model: torch.nn.Module,
    device: torch.device,
    *,
    masters: Iterable[torch.Tensor] = (),
    optimizer: torch.optim.Optimizer | None = None,
) -> OffloadReport:
    """Move `model`'s parameters, buffers and gradients, the `masters` and `optimizer`'s state from `device`
    to CPU memory (pinned from CUDA)."""
    return _swap(_state(model, masters, optimizer), torch.device("cpu"), device)


def reload_tensors(
    model: torch.nn.Module,
    device: torch.device,
    *,
    masters: Iterable[torch.Tensor] = (),
    optimizer: torch.optim.Optimizer | None = None,
) -> OffloadReport:
    """Undo `offload_tensors`: everything back on `device`."""
    return _swap(_state(model, masters, optimizer), device, device)


class TrainStateOffload:
    """One model and its train state (`state()`: the `masters` / `optimizer` keywords of `offload_tensors`, read at
    each move) offloaded and reloaded as a strategy's `offload` / `reload`: each moves nothing when the state is
    already where it asks."""

    def __init__(
        self, model: torch.nn.Module, device: torch.device, state: Callable[[], Mapping[str, Any]]
    ) -> None:
        self.model, self.device, self.state = model, device, state
        self.offloaded = False

    def offload(self) -> OffloadReport:
        """Everything to CPU memory until `reload` (a second call moves nothing)."""
        if self.offloaded:
            return OffloadReport(0.0, 0)
        self.offloaded = True
        return offload_tensors(self.model, self.device, **self.state())

    def reload(self) -> OffloadReport:
        """Everything back on the device (nothing moves when not offloaded)."""
        if not self.offloaded:
            return OffloadReport(0.0, 0)
        self.offloaded = False
        return reload_tensors(self.model, self.device, **self.state())
