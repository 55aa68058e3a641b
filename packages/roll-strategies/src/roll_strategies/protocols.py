"""The seams the pipeline codes against: any train or infer backend (hf, deepspeed, vllm) fits these.

Backends are picked by name through `roll_strategies.registry`; these Protocols say what each role's
strategy offers, and the types they exchange live here, below every backend: the sampling settings and
results (`GenerationParams`, `GenerationOutput`) and the losses a train step runs (`LossFn`, `ValueLossFn`,
on a `roll_algos.MicroBatch`). Weight sync is bucketed and versioned (`roll_strategies.sync.weight_sync`): a
train strategy is a `WeightSource`, an inference strategy a `WeightSink`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.errors import StrategyError
from roll_strategies.sync.weight_sync import WeightBucket, WeightSyncPlan

__all__ = [
    "FinishReason",
    "GenerationOutput",
    "GenerationParams",
    "InferStrategy",
    "LogProbStrategy",
    "LossFn",
    "SleepableStrategy",
    "StreamingInferStrategy",
    "TrainStrategy",
    "ValueLossFn",
    "check_prompts",
]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings of one `generate` call."""

    max_new_tokens: int
    """Upper bound on sampled tokens per prompt (finish_reason "length" when reached without a stop token)."""
    temperature: float = 1.0
    """Logits are divided by it before sampling (and before computing the returned log-probs)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 disables."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables."""
    greedy: bool = False
    """Argmax decoding (log-probs then use temperature 1)."""
    stop_token_ids: tuple[int, ...] | None = None
    """Generation of a row ends after any of these; None -> the tokenizer's eos."""
    stop_strings: tuple[str, ...] = ()
    """Generation of a row also ends at the sampled token whose text completes any of these (any number of
    tokens, matched in the decoded text of the row's own sampled ids, not the prompt); that token is kept."""

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, str) or not all(isinstance(s, str) and s for s in self.stop_strings):
            raise StrategyError(
                f"Expected stop_strings to be a tuple of non-empty strings, got {self.stop_strings!r}; an empty "
                "string would end every response at once, and a bare string must be wrapped: ('</answer>',)."
            )
        # A list is accepted too; stored as a tuple so the params stay hashable.
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if self.max_new_tokens < 1 or self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise StrategyError(
                f"Expected max_new_tokens >= 1, temperature > 0, 0 < top_p <= 1, top_k >= 0; got {self}. "
                "Use greedy=True for argmax decoding instead of temperature 0."
            )


def check_prompts(prompts: Sequence[Sequence[int]]) -> None:
    """Refuse what no `generate` call can sample from: no prompts, or an empty one."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise StrategyError(
            "Expected a non-empty list of non-empty prompts (token id lists); got an empty one."
        )


@dataclass(frozen=True)
class GenerationOutput:
    """What one prompt produced."""

    output_ids: list[int]
    """Sampled ids, ending with the stop token (or the token that completes a stop string) when
    finish_reason is "stop"; no padding."""
    log_probs: list[float]
    """log_softmax(raw logits / temperature)[sampled id] per output id (temperature 1 when greedy)."""
    finish_reason: FinishReason
    """"stop" (a stop token was sampled, or a stop string completed) or "length" (max_new_tokens reached)."""


class LossFn(Protocol):
    """loss_fn(log_probs [B, T], entropy [B, T] | None, micro_batch) -> (scalar loss, {name: float}).

    log_probs / entropy are aligned with micro_batch["input_ids"] (position 0 is 0) and carry grad. With a
    `response_mask` in the micro-batch they are computed at its positions only (zero elsewhere), padded or
    packed (`forward.PACK_CAPACITY_KEY`); with `forward.REFERENCE_KEY` (a frozen model) the strategy adds
    `full_kl` / `full_kl_forward` [B, T], the exact KL to it, computed chunk by chunk of positions.
    """

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, micro_batch: MicroBatch
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


class ValueLossFn(Protocol):
    """loss_fn(values [B, T], micro_batch) -> (scalar loss, {name: float}); values carry grad and are
    aligned with micro_batch["input_ids"] (zero outside micro_batch["response_mask"])."""

    def __call__(
        self, values: torch.Tensor, micro_batch: MicroBatch
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


@runtime_checkable
class LogProbStrategy(Protocol):
    """What the reference role needs: log-probs of given sequences."""

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor: ...


@runtime_checkable
class TrainStrategy(LogProbStrategy, Protocol):
    """Computes log-probs and trains a policy; serves its weights (one-shot or bucketed); checkpoints."""

    step: int

    def train_step(
        self,
        micro_batches: Sequence[MicroBatch],
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
class InferStrategy(LogProbStrategy, Protocol):
    """Samples continuations of token-id prompts and receives versioned weights from a train strategy."""

    policy_version: int
    tokenizer: Any

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]: ...

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
