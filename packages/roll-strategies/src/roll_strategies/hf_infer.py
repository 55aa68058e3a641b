"""`HFInferStrategy`: batched sampling with Hugging Face `generate`, token ids in and out, log-probs kept."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessorList

from roll_strategies._loading import load_model_and_tokenizer
from roll_strategies.errors import StrategyError
from roll_strategies.logprobs import batched_log_probs
from roll_strategies.sampling import KeyedSampler, row_keys
from roll_strategies.weight_receiver import WeightReceiver
from roll_strategies.weight_sync import WeightBucket
from roll_strategies.weights import load_named_weights, tensor_shape, unique_named_tensors

__all__ = ["GenerationOutput", "GenerationParams", "HFInferStrategy"]

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

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise StrategyError(
                f"Expected max_new_tokens >= 1, temperature > 0, 0 < top_p <= 1, top_k >= 0; got {self}. "
                "Use greedy=True for argmax decoding instead of temperature 0."
            )


@dataclass(frozen=True)
class GenerationOutput:
    """What one prompt produced."""

    output_ids: list[int]
    """Sampled ids, ending with the stop token when finish_reason is "stop"; no padding."""
    log_probs: list[float]
    """log_softmax(raw logits / temperature)[sampled id] per output id (temperature 1 when greedy)."""
    finish_reason: FinishReason
    """"stop" (a stop token was sampled) or "length" (max_new_tokens reached)."""


class HFInferStrategy:
    """Inference backend on a Hugging Face causal LM (CPU or one GPU), seeded and token-in/token-out."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        gguf_file: str | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.model, self.tokenizer = load_model_and_tokenizer(
            model_path, device=device, dtype=dtype, gguf_file=gguf_file
        )
        self.model.eval()
        # Hub defaults (top_k, repetition_penalty, ...) must not leak into sampling: every call passes a full
        # GenerationConfig, and the model's own one is reset so nothing is merged from it.
        self.model.generation_config = GenerationConfig()
        self.seed = seed
        self.receiver = WeightReceiver(
            {name: tensor_shape(t) for name, t in unique_named_tensors(self.model).items()},
            lambda tensors: load_named_weights(self.model, tensors),
        )
        self._calls = itertools.count()

    @property
    def policy_version(self) -> int:
        """Version of the weights held (0 until the first update)."""
        return self.receiver.policy_version

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output layer (ids the model can sample)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def _pad_left(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not prompts or any(len(p) == 0 for p in prompts):
            raise StrategyError(
                "Expected a non-empty list of non-empty prompts (token id lists); got an empty one."
            )
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), int(self.tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _generation_config(self, params: GenerationParams, stop_ids: list[int]) -> GenerationConfig:
        # Always argmax decoding: sampling is done by `KeyedSampler` (a logits processor), per row.
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=False,
            eos_token_id=stop_ids,
            pad_token_id=int(self.tokenizer.pad_token_id),
            output_logits=True,
            return_dict_in_generate=True,
            use_cache=True,
        )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]:
        """Sample a continuation of each prompt in one batched, left-padded `model.generate` call.

        Reproducible without global RNG state: a row with a sample key draws its tokens from (seed, key)
        whatever else is in the batch (`roll_strategies.sampling`); a row without one from (seed, call k of
        this strategy, row).
        """
        stop_ids = list(params.stop_token_ids or [int(self.tokenizer.eos_token_id)])
        input_ids, attention_mask = self._pad_left(prompts)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and input_ids.shape[1] + params.max_new_tokens > limit:
            raise StrategyError(
                f"Expected prompt + max_new_tokens <= max_position_embeddings ({limit}), got a prompt of "
                f"{input_ids.shape[1]} tokens + {params.max_new_tokens}; shorten the history kept in prompts "
                "or lower max_new_tokens."
            )
        keys = row_keys(self.seed, next(self._calls), len(prompts), sample_keys)
        sampler = [] if params.greedy else [KeyedSampler(keys, **_warping(params))]
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=self._generation_config(params, stop_ids),
                logits_processor=LogitsProcessorList(sampler),
            )
        new_ids = out.sequences[:, input_ids.shape[1] :].cpu()
        temperature = 1.0 if params.greedy else params.temperature
        logits = torch.stack(out.logits, dim=1).float().cpu()  # [B, N, V] raw logits
        log_probs = (
            torch.log_softmax(logits / temperature, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
        )
        return [
            self._trim(row_ids.tolist(), row_lp.tolist(), set(stop_ids))
            for row_ids, row_lp in zip(new_ids, log_probs, strict=True)
        ]

    @staticmethod
    def _trim(ids: list[int], log_probs: list[float], stop_ids: set[int]) -> GenerationOutput:
        for i, token in enumerate(ids):
            if token in stop_ids:
                return GenerationOutput(ids[: i + 1], log_probs[: i + 1], "stop")
        return GenerationOutput(ids, log_probs, "length")

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs aligned with batch["input_ids"] (see `token_log_probs`), no grad, on CPU."""
        return batched_log_probs(self.model, batch, micro_batch_size, device=self.device)

    def update_weights(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int) -> None:
        """Load `named_tensors` (e.g. `HFTrainStrategy.export_weights()`) in place, strictly; set the version.

        A version older than the one held raises `StaleWeightsError` (weights unchanged).
        """
        self.receiver.replace(named_tensors, version)

    def receive_weight_bucket(self, bucket: WeightBucket) -> dict[str, float] | None:
        """Stage one bucket of a bucketed update; the last one applies it (see `WeightReceiver.receive`)."""
        return self.receiver.receive(bucket)

    def confirm_weights(self, version: int, fingerprint: str) -> None:
        """Record `version` without a transfer when the sender's weights are the ones held here."""
        self.receiver.confirm(version, fingerprint)

    def weights_fingerprint(self) -> str:
        """Fingerprint of the weights held (the sender's, after a bucketed update)."""
        return self.receiver.fingerprint

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory while training runs (colocated): the model moves to the CPU (any `level`);
        a no-op on the CPU."""
        if self.device.type != "cpu":
            self.model.to("cpu")
            torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """Undo `sleep`: the model returns to its device."""
        if self.device.type != "cpu":
            self.model.to(self.device)


def _warping(params: GenerationParams) -> dict[str, float | int]:
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p}
