"""Errors of roll-algos and the small validators every public function runs on its inputs.

Messages state what was expected, what came, and how to fix it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["AlgosError", "ShapeError", "check_same_shape", "check_shape"]


class AlgosError(ValueError):
    """Base class of every error roll-algos raises on bad arguments."""


class ShapeError(AlgosError):
    """A tensor has the wrong shape or dtype for the function it was passed to."""


def check_shape(name: str, tensor: torch.Tensor | None, shape: Sequence[int | None], hint: str = "") -> None:
    """Raise `ShapeError` unless `tensor` has len(shape) dims and matches every non-None size.

    Args:
        name: the argument name, for the message.
        tensor: the tensor to check (None raises).
        shape: expected sizes; None matches any size in that dim.
        hint: how to fix it, appended to the message.
    """
    if not isinstance(tensor, torch.Tensor):
        raise ShapeError(
            f"{name}: expected a torch.Tensor of shape {list(shape)}, got {type(tensor).__name__}. {hint}"
        )
    ok = tensor.dim() == len(shape) and all(
        e is None or e == s for e, s in zip(shape, tensor.shape, strict=False)
    )
    if not ok:
        want = "[" + ", ".join("*" if e is None else str(e) for e in shape) + "]"
        raise ShapeError(f"{name}: expected shape {want}, got {list(tensor.shape)}. {hint}".rstrip())


def check_same_shape(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Raise `ShapeError` unless every tensor in `others` (None skipped) has `reference`'s shape."""
    for name, tensor in others.items():
        if tensor is None:
            continue
        check_shape(
            name,
            tensor,
            list(reference.shape),
            hint=f"It must match {reference_name} {list(reference.shape)}.",
        )
