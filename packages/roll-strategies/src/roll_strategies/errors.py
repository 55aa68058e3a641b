"""Errors raised by roll_strategies: each message says what was expected, what came, and the fix."""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ModelNotFoundError",
    "StaleWeightsError",
    "StrategyError",
    "StrategyNotAvailableError",
    "WeightSyncError",
]


class StrategyError(Exception):
    """Base class of every error raised by roll_strategies."""


class ModelNotFoundError(StrategyError, FileNotFoundError):
    """A model folder is missing or lacks the files a Hugging Face model needs."""

    def __init__(self, path: object, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"Expected a Hugging Face model folder (config.json, model.safetensors, tokenizer files) at "
            f"{path!s}, found none{extra}. No model hub is reachable here: build the tiny offline model with "
            f"`uv run python tools/build_tiny_model.py --out {path!s}` (or roll_strategies.build_tiny_model), "
            f"or point model_path at an existing local model folder."
        )


class WeightSyncError(StrategyError):
    """A weight update the inference side refuses (wrong names/shapes, a bucket missing or out of order)."""


class StaleWeightsError(WeightSyncError):
    """A weight update older than the weights the inference side already holds (kept unchanged)."""


class StrategyNotAvailableError(StrategyError, ImportError):
    """A strategy name that is unknown, or whose optional backend library is not installed."""


class CheckpointError(StrategyError):
    """A checkpoint folder is missing, incomplete, or was written by a different model."""
