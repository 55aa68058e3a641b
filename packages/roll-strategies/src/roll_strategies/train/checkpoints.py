"""The checkpoint files the HF train strategies share (`HFTrainStrategy`, `HFCriticStrategy`): the model folder with
its float32 masters, the trainer state's file name, and reading them with a `CheckpointError` that names the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from roll_strategies.errors import CheckpointError
from roll_strategies.train.master_weights import MasterWeightOptimizer

__all__ = ["TRAINER_STATE_FILE", "checkpoint_files", "read_checkpoint_file", "save_model"]

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


def checkpoint_files(path: Path, writer: str) -> tuple[Path, Path]:
    """(weights, trainer state) of a checkpoint folder written by `writer`.save_checkpoint; a missing file is a
    `CheckpointError` listing what the folder holds."""
    weights, state_file = path / "model.safetensors", path / TRAINER_STATE_FILE
    if not weights.exists() or not state_file.exists():
        raise CheckpointError(
            f"Expected {weights.name} and {state_file.name} in {path}, found "
            f"{sorted(p.name for p in path.iterdir()) if path.is_dir() else 'no folder'}; pass a folder "
            f"written by {writer}.save_checkpoint."
        )
    return weights, state_file


def read_checkpoint_file(path: Path, load: Callable[[], T]) -> T:
    """`load()`, with any failure to read `path` raised as a `CheckpointError` naming the file."""
    try:
        return load()
    except Exception as exc:  # safetensors, torch and pickle raise unrelated types on a damaged file
        raise CheckpointError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); the file is damaged or truncated. "
            "Resume from an earlier checkpoint."
        ) from exc
