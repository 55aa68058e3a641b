"""Named-tensor weight sync between a train model and an infer model (tied weights handled once), and a model's
weights to and from one safetensors file (a reference that took the actor's weights, kept in a checkpoint)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from roll_strategies.errors import WeightSyncError

__all__ = [
    "export_named_weights",
    "load_named_weights",
    "load_weights_file",
    "save_weights_file",
    "tensor_shape",
    "tied_aliases",
    "unique_named_tensors",
]


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """{alias name: first name} for state-dict entries sharing storage (e.g. lm_head.weight -> embed_tokens)."""
    seen: dict[tuple[int, tuple[int, ...]], str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    return aliases


def unique_named_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """State-dict entries (parameters and persistent buffers) as live tensors, a shared one once (first name).

    Sharing is by object identity, so it also holds for ZeRO-3 partitioned parameters (whose storage is
    empty); for Hugging Face tied embeddings it gives the same names as skipping `tied_aliases`.
    """
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            out[name] = tensor
    return out


def tensor_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """Full shape of a tensor, also of a ZeRO-3 partitioned parameter (its `ds_shape`)."""
    return tuple(getattr(tensor, "ds_shape", tensor.shape))


def export_named_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """CPU float32 numpy copies of the state dict, each tied tensor once (under its first name)."""
    aliases = tied_aliases(model)
    return {
        name: tensor.detach().to("cpu", torch.float32).numpy().copy()
        for name, tensor in model.state_dict().items()
        if name not in aliases
    }


def load_named_weights(model: nn.Module, named_tensors: Mapping[str, np.ndarray | torch.Tensor]) -> None:
    """Copy `named_tensors` into `model` in place (dtype/device cast), strictly.

    Every state-dict entry must be given except tied aliases (which follow their source); unknown
    names and shape mismatches raise `WeightSyncError` listing the offenders.
    """
    state = model.state_dict()
    aliases = tied_aliases(model)
    required = set(state) - set(aliases)
    missing = sorted(required - set(named_tensors))
    unexpected = sorted(set(named_tensors) - set(state))
    bad_shapes = [
        f"{n}: expected {tuple(state[n].shape)}, got {tuple(v.shape)}"
        for n, v in named_tensors.items()
        if n in state and tuple(v.shape) != tuple(state[n].shape)
    ]
    if missing or unexpected or bad_shapes:
        raise WeightSyncError(
            "Expected named tensors matching the receiving model's state dict; "
            f"missing={missing[:5]}{'...' if len(missing) > 5 else ''} ({len(missing)}), "
            f"unexpected={unexpected[:5]} ({len(unexpected)}), shape mismatches={bad_shapes[:5]}. "
            "Fix: export with the train strategy's export_weights() from a model of the same architecture "
            "and vocabulary (both workers must load the same model folder)."
        )
    with torch.no_grad():
        for name, value in named_tensors.items():
            if name in aliases and name not in required:
                continue
            # Arrays that crossed Ray arrive read-only; copy_ only reads them, so skip torch's warning.
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                value = value.copy()
            src = torch.as_tensor(value)
            state[name].copy_(src.to(device=state[name].device, dtype=state[name].dtype))


def save_weights_file(model: nn.Module, path: Path) -> None:
    """`model`'s state dict as one safetensors file (no pickle), in its own dtypes, each tied tensor once."""
    from safetensors.torch import save_file

    tensors = {n: t.detach().to("cpu").contiguous() for n, t in unique_named_tensors(model).items()}
    save_file(tensors, str(path))


def load_weights_file(model: nn.Module, path: Path) -> None:
    """Undo `save_weights_file`: the file's tensors into `model` in place, strictly (`load_named_weights`)."""
    from safetensors.torch import load_file

    load_named_weights(model, load_file(str(path)))
