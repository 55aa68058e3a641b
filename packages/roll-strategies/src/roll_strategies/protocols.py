"""The seams the pipeline codes against: any train or infer backend (hf, deepspeed, vllm) fits these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from roll_strategies.hf_infer import GenerationOutput, GenerationParams
from roll_strategies.hf_train import LossFn

__all__ = ["InferStrategy", "TrainStrategy"]


@runtime_checkable
class TrainStrategy(Protocol):
    """Computes log-probs and trains a policy; exports weights; saves and loads checkpoints."""

    step: int

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...

    def train_step(
        self, micro_batches: Sequence[Mapping[str, torch.Tensor]], loss_fn: LossFn, *, with_entropy: bool
    ) -> dict[str, float]: ...

    def export_weights(self) -> dict[str, np.ndarray]: ...

    def save_checkpoint(self, path: Path) -> None: ...

    def load_checkpoint(self, path: Path) -> None: ...


@runtime_checkable
class InferStrategy(Protocol):
    """Samples continuations of token-id prompts and receives weights from a train strategy."""

    policy_version: int

    def generate(
        self, prompts: Sequence[Sequence[int]], params: GenerationParams
    ) -> list[GenerationOutput]: ...

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...

    def update_weights(
        self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int
    ) -> None: ...
