"""The seams the pipeline codes against: any train or infer backend (hf, deepspeed, vllm) fits these.

Backends are picked by name through `roll_strategies.registry`; these Protocols say what each role's
strategy offers. Weight sync is bucketed and versioned (`roll_strategies.sync.weight_sync`): a train strategy is
a `WeightSource`, an inference strategy a `WeightSink`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from roll_strategies.infer.hf_infer import GenerationOutput, GenerationParams
from roll_strategies.sync.weight_sync import WeightBucket, WeightSyncPlan
from roll_strategies.train.hf_train import LossFn

__all__ = ["InferStrategy", "LogProbStrategy", "SleepableStrategy", "StreamingInferStrategy", "TrainStrategy"]


@runtime_checkable
class LogProbStrategy(Protocol):
    """What the reference role needs: log-probs of given sequences."""

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...


@runtime_checkable
class TrainStrategy(Protocol):
    """Computes log-probs and trains a policy; serves its weights (one-shot or bucketed); checkpoints."""

    step: int

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...

    def train_step(
        self,
        micro_batches: Sequence[Mapping[str, torch.Tensor]],
        loss_fn: LossFn,
        *,
        with_entropy: bool,
        lr_scale: float = 1.0,
    ) -> dict[str, float]: ...

    def export_weights(self) -> dict[str, np.ndarray]: ...

    def weights_fingerprint(self) -> str: ...

    def weight_sync_plan(self, version: int, *, dtype: str, bucket_bytes: int) -> WeightSyncPlan: ...

    def weight_bucket(self, plan: WeightSyncPlan, index: int) -> WeightBucket: ...

    def save_checkpoint(self, path: Path) -> None: ...

    def load_checkpoint(self, path: Path) -> None: ...


@runtime_checkable
class InferStrategy(Protocol):
    """Samples continuations of token-id prompts and receives versioned weights from a train strategy."""

    policy_version: int
    tokenizer: Any

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]: ...

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...

    def update_weights(
        self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int
    ) -> None: ...

    def receive_weight_bucket(self, bucket: WeightBucket) -> dict[str, float] | None: ...

    def confirm_weights(self, version: int, fingerprint: str) -> None: ...

    def weights_fingerprint(self) -> str: ...


@runtime_checkable
class StreamingInferStrategy(Protocol):
    """An inference strategy whose engine batches continuously (vllm): each request is submitted on its own,
    as soon as it comes, and answered as soon as it is done, while the engine's scheduler batches the
    requests in flight. The capability that makes the policy server stream (`roll_rollout.StreamingPolicy`)
    rather than batch (`BatchingPolicy`)."""

    async def agenerate_one(
        self, prompt: Sequence[int], params: GenerationParams, sample_key: int | None = None
    ) -> GenerationOutput: ...


@runtime_checkable
class SleepableStrategy(Protocol):
    """An inference strategy that can free accelerator memory while a colocated trainer runs; `sleep`
    returns whether it sleeps now (False where it cannot, e.g. on the CPU)."""

    def sleep(self, level: int = 1) -> bool: ...

    def wake_up(self) -> None: ...
