"""Role workers: plain classes owning one strategy each, wrapped with `ray.remote` at the call site.

Ray cannot read attributes of an actor, so state the pipeline needs (step, policy version) has getters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roll_strategies.critic import HFCriticStrategy, ValueLossFn
from roll_strategies.forward import full_log_probs, packing_supported
from roll_strategies.hf_infer import GenerationOutput, GenerationParams, HFInferStrategy
from roll_strategies.hf_train import HFTrainStrategy, LossFn

__all__ = ["ActorInferWorker", "ActorTrainWorker", "CriticWorker", "ReferenceWorker"]


def _set_threads(num_threads: int | None) -> None:
    if num_threads is not None:
        torch.set_num_threads(max(1, int(num_threads)))


class ActorTrainWorker:
    """Owns the trainable policy (`HFTrainStrategy`); kwargs go to the strategy."""

    def __init__(
        self, model_path: str | Path, *, num_threads: int | None = None, **strategy_kwargs: Any
    ) -> None:
        _set_threads(num_threads)
        self.strategy = HFTrainStrategy(model_path, **strategy_kwargs)

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """Old-policy log-probs [B, T] aligned with input_ids."""
        return self.strategy.compute_log_probs(batch, micro_batch_size)

    def train_step(
        self,
        micro_batches: Sequence[Mapping[str, torch.Tensor]],
        loss_fn: LossFn,
        *,
        with_entropy: bool,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimizer step; returns averaged metrics + grad_norm + lr."""
        return self.strategy.train_step(micro_batches, loss_fn, with_entropy=with_entropy, lr_scale=lr_scale)

    def export_weights(self) -> dict[str, np.ndarray]:
        """Weights for `ActorInferWorker.update_weights`."""
        return self.strategy.export_weights()

    def save_checkpoint(self, path: str | Path) -> None:
        """See `HFTrainStrategy.save_checkpoint`."""
        self.strategy.save_checkpoint(Path(path))

    def load_checkpoint(self, path: str | Path) -> None:
        """See `HFTrainStrategy.load_checkpoint`."""
        self.strategy.load_checkpoint(Path(path))

    def get_step(self) -> int:
        """Optimizer steps taken (restored by load_checkpoint)."""
        return self.strategy.step

    def packing_supported(self) -> bool:
        """Whether packed micro-batches (`forward.PACK_CAPACITY_KEY`) give the padded results on this model."""
        return packing_supported(self.strategy.model)

    def compute_full_log_probs(
        self, batch: Mapping[str, torch.Tensor], micro_batch_size: int
    ) -> torch.Tensor:
        """[N, V] log-softmax at the response positions (row-major): the exact `full` KL estimator's input."""
        return full_log_probs(self.strategy.model, batch, micro_batch_size, device=self.strategy.device)


class ActorInferWorker:
    """Owns the sampling copy of the policy (`HFInferStrategy`); kwargs go to the strategy."""

    def __init__(
        self, model_path: str | Path, *, num_threads: int | None = None, **strategy_kwargs: Any
    ) -> None:
        _set_threads(num_threads)
        self.strategy = HFInferStrategy(model_path, **strategy_kwargs)

    def generate(self, prompts: Sequence[Sequence[int]], params: GenerationParams) -> list[GenerationOutput]:
        """Batched sampling, token ids in and out, with per-token log-probs."""
        return self.strategy.generate(prompts, params)

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """Log-probs [B, T] under the current sampling weights."""
        return self.strategy.compute_log_probs(batch, micro_batch_size)

    def update_weights(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int) -> None:
        """Load weights exported by the train worker; set the policy version."""
        self.strategy.update_weights(named_tensors, version)

    def get_policy_version(self) -> int:
        """Version passed with the last update_weights (0 before any)."""
        return self.strategy.policy_version


class ReferenceWorker:
    """Owns the frozen reference policy (an `HFTrainStrategy` with trainable=False)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        num_threads: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        _set_threads(num_threads)
        self.strategy = HFTrainStrategy(model_path, device=device, dtype=dtype, trainable=False)

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """Reference log-probs [B, T] aligned with input_ids."""
        return self.strategy.compute_log_probs(batch, micro_batch_size)

    def compute_full_log_probs(
        self, batch: Mapping[str, torch.Tensor], micro_batch_size: int
    ) -> torch.Tensor:
        """[N, V] reference log-softmax at the response positions (row-major), for the `full` KL."""
        return full_log_probs(self.strategy.model, batch, micro_batch_size, device=self.strategy.device)


class CriticWorker:
    """Owns the PPO critic (`HFCriticStrategy`: a value model with its own optimiser); kwargs go to it."""

    def __init__(
        self, model_path: str | Path, *, num_threads: int | None = None, **strategy_kwargs: Any
    ) -> None:
        _set_threads(num_threads)
        self.strategy = HFCriticStrategy(model_path, **strategy_kwargs)

    def compute_values(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """Values [B, T] at the response positions, aligned with input_ids."""
        return self.strategy.compute_values(batch, micro_batch_size)

    def train_step(
        self,
        micro_batches: Sequence[Mapping[str, torch.Tensor]],
        loss_fn: ValueLossFn,
        *,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimiser step of the critic; returns averaged metrics + grad_norm + lr."""
        return self.strategy.train_step(micro_batches, loss_fn, lr_scale=lr_scale)

    def packing_supported(self) -> bool:
        """Whether packed micro-batches give the padded values on this model."""
        return self.strategy.packing_supported()

    def save_checkpoint(self, path: str | Path) -> None:
        """See `HFCriticStrategy.save_checkpoint`."""
        self.strategy.save_checkpoint(Path(path))

    def load_checkpoint(self, path: str | Path) -> None:
        """See `HFCriticStrategy.load_checkpoint`."""
        self.strategy.load_checkpoint(Path(path))
