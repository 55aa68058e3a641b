"""The checkpoint folder both HF train strategies write and read (`HFTrainStrategy`, `HFCriticStrategy`): the
model with its float32 masters, the tokenizer and the trainer state; a missing or damaged file is a
`CheckpointError` that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_file

from roll_strategies.errors import CheckpointError
from roll_strategies.train.master_weights import MasterWeightOptimizer

__all__ = ["TRAINER_STATE_FILE", "read_checkpoint", "save_model", "write_checkpoint"]

TRAINER_STATE_FILE = "trainer_state.pt"
"""The trainer state (step, rng, optimiser, counters) beside the model in a checkpoint folder."""

T = TypeVar("T")


def save_model(model: torch.nn.Module, path: Path, trainer: MasterWeightOptimizer | None) -> None:
    """`model` as a Hugging Face folder in `path`, its trained weights being the float32 masters where
    `trainer` keeps them (so a checkpoint restores them exactly; loaders cast to their own dtype)."""
    if trainer is None or not trainer.has_copies:
        model.save_pretrained(path, safe_serialization=True)
    else:
        model.save_pretrained(path, state_dict=trainer.named_weights(model), safe_serialization=True)


def write_checkpoint(
    path: Path, model: torch.nn.Module, tokenizer: Any, trainer: MasterWeightOptimizer | None, step: int
) -> None:
    """`model` (`save_model`), `tokenizer` and the trainer state (step, torch's rng, which dropout draws from,
    and `trainer.state_dict()`: optimiser, scheduler, loss scale, non-finite counters) into `path`."""
    path.mkdir(parents=True, exist_ok=True)
    save_model(model, path, trainer)
    tokenizer.save_pretrained(path)
    state = {
        "step": step,
        "rng": torch.get_rng_state(),
        **(trainer.state_dict() if trainer is not None else {}),
    }
    torch.save(state, path / TRAINER_STATE_FILE)


def read_checkpoint(
    path: Path, writer: str, device: torch.device
) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path]:
    """(named weights on `device`, trainer state, its file) of a folder `writer`.save_checkpoint wrote; a missing
    file is a `CheckpointError` listing what the folder holds, a damaged one a `CheckpointError` naming it."""
    weights, state_file = path / "model.safetensors", path / TRAINER_STATE_FILE
    if not weights.exists() or not state_file.exists():
        raise CheckpointError(
            f"Expected {weights.name} and {state_file.name} in {path}, found "
            f"{sorted(p.name for p in path.iterdir()) if path.is_dir() else 'no folder'}; pass a folder "
            f"written by {writer}.save_checkpoint."
        )
    named = _read(weights, lambda: load_file(str(weights), device=str(device)))
    state = _read(state_file, lambda: torch.load(state_file, weights_only=True, map_location="cpu"))
    return named, state, state_file


def _read(path: Path, load: Callable[[], T]) -> T:
    """`load()`, with any failure to read `path` raised as a `CheckpointError` naming the file."""
    try:
        return load()
    except Exception as exc:  # safetensors, torch and pickle raise unrelated types on a damaged file
        raise CheckpointError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); the file is damaged or truncated. "
            "Resume from an earlier checkpoint."
        ) from exc
