"""`HFInferStrategy`: batched sampling with Hugging Face `generate`, token ids in and out, log-probs kept.

Memory: only the sampled tokens' log-probs are kept. `SampledLogProbs` (a logits processor) holds one
[batch, vocab] row of log-probs at a time, never the [batch, new tokens, vocab] logits of the whole call.

Stop strings of any length: `StopStrings` (a stopping criterion) decodes the tail of each row's own sampled
ids every step and ends the row at the token whose text completes a stop string; that token is kept, later
ones (HF pads finished rows) are trimmed. No text is re-tokenised: the ids returned are the ids sampled.

Shared prefixes (`share_prefix=True`): a batch that repeats a prompt (a group of samples of one prompt)
runs the prompt once; the prefix all its prompts share (a system turn, an instruction) runs once for the batch;
and a prompt that starts with a sequence an earlier call ran (an episode's previous turn: its prompt and sampled
ids) reuses that sequence's keys and values, so a next turn encodes only the ids it adds (`PromptCache`,
`TurnCache`). `generate` continues from that cache; its first step runs only each row's last prompt token.
Decoding, sampling keys, stop strings and log-probs are those of the plain path; tokens and log-probs equal it up
to float rounding (the same positions, other matmul shapes). The kept sequences are cleared when weights load,
and bounded by `turn_cache_bytes`. Heads are used on models whose every layer attends to all positions (no
sliding window). `compute_log_probs` runs each micro-batch as one prefix tree
(`recompute.batched_log_probs(share_prefix=True)`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

from roll_strategies.compute.attention_windows import describe_windows
from roll_strategies.compute.probes import prefix_sharing_supported
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.errors import StrategyError
from roll_strategies.infer.prompt_cache import TURN_CACHE_BYTES, Head, PromptCache, pad_left
from roll_strategies.infer.sampling import KeyedSampler, row_keys
from roll_strategies.infer.slot_decode import decode_settings, slot_decoder
from roll_strategies.infer.turn_cache import TurnCache
from roll_strategies.models._loading import load_model_and_tokenizer
from roll_strategies.protocols import GenerationOutput, GenerationParams, check_prompts
from roll_strategies.sync import endpoints
from roll_strategies.sync.weight_receiver import WeightReceiver
from roll_strategies.sync.weights import load_named_weights, tensor_shape, unique_named_tensors

__all__ = ["HFInferStrategy", "SampledLogProbs", "StopStrings"]


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
        share_prefix: bool = False,
        turn_cache_bytes: int = TURN_CACHE_BYTES,
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        """`share_prefix`: encode each distinct prompt of a batch once, reuse the keys and values of earlier
        calls' sequences (at most `turn_cache_bytes` of them; 0 keeps none) and score log-probs as prefix
        trees (module docstring); refused for a model on which the tree forward is not exact.
        `strategy_config`: `decode` ("auto": static on CUDA, generate on the CPU; "generate"; "static", the
        `slot_decode.SlotDecoder`), `decode_slots` (sequences it decodes at once) and `decode_graphs` (CUDA:
        each decode step replayed as a CUDA graph)."""
        if turn_cache_bytes < 0:
            raise StrategyError(f"Expected turn_cache_bytes >= 0 (0 keeps no turns), got {turn_cache_bytes}.")
        self.device = torch.device(device)
        self.model, self.tokenizer = load_model_and_tokenizer(
            model_path, device=device, dtype=dtype, gguf_file=gguf_file
        )
        self.model.eval()
        # Hub defaults (top_k, repetition_penalty, ...) must not leak into sampling: every call passes a full
        # GenerationConfig, and the model's own one is reset so nothing is merged from it.
        self.model.generation_config = GenerationConfig()
        self.seed = seed
        self.share_prefix = share_prefix
        if share_prefix and not prefix_sharing_supported(self.model):
            raise StrategyError(
                "Expected a model whose prefix-tree forward equals its per-sequence forward for "
                f"share_prefix=True, but {type(self.model).__name__} ({describe_windows(self.model)}) gives "
                "other outputs; set share_prefix=false."
            )
        self.prompt_cache = (
            PromptCache(self.model, int(self.tokenizer.pad_token_id), turn_cache_bytes)
            if share_prefix
            else None
        )
        self.turns = self.prompt_cache.turns if self.prompt_cache else TurnCache(0)
        self.receiver = WeightReceiver(
            {name: tensor_shape(t) for name, t in unique_named_tensors(self.model).items()},
            self._load_weights,
        )
        self._calls = itertools.count()
        self.decoder = slot_decoder(self.model, self.tokenizer, *decode_settings(strategy_config), self.turns)

    policy_version = endpoints.policy_version

    def forget_turns(self) -> None:
        """Drop every kept sequence: later calls reuse only what they run themselves."""
        self.turns.clear()

    def _load_weights(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.turns.clear()  # kept keys and values belong to the old weights
        load_named_weights(self.model, tensors)

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output layer (ids the model can sample)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def _pad_left(
        self, prompts: Sequence[Sequence[int]], heads: Sequence[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids and attention mask [B, width], each prompt right-aligned; with `heads`, laid out as
        [padding][head][padding][rest] (`prompt_cache.pad_left`)."""
        check_prompts(prompts)
        heads = list(heads) if heads is not None else [0] * len(prompts)
        return pad_left(prompts, heads, int(self.tokenizer.pad_token_id), self.device)

    def _generation_config(self, params: GenerationParams, stop_ids: list[int]) -> GenerationConfig:
        # Always argmax decoding: sampling is done by `KeyedSampler` (a logits processor), per row. No logits or
        # scores are returned: `SampledLogProbs` keeps the sampled tokens' log-probs as generation goes.
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=False,
            eos_token_id=stop_ids,
            pad_token_id=int(self.tokenizer.pad_token_id),
            output_logits=False,
            output_scores=False,
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
        whatever else is in the batch (`roll_strategies.infer.sampling`); a row without one from (seed, call k of
        this strategy, row).
        """
        stop_ids = list(params.stop_token_ids or [int(self.tokenizer.eos_token_id)])
        longest = max((len(p) for p in prompts), default=0)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and longest + params.max_new_tokens > limit:
            raise StrategyError(
                f"Expected prompt + max_new_tokens <= max_position_embeddings ({limit}), got a prompt of "
                f"{longest} tokens + {params.max_new_tokens}; shorten the history kept in prompts "
                "or lower max_new_tokens."
            )
        if self.decoder is not None:
            keys = row_keys(self.seed, next(self._calls), len(prompts), sample_keys)
            return [GenerationOutput(*row) for row in self.decoder.generate(prompts, params, keys, stop_ids)]
        heads: list[Head] = (
            self.prompt_cache.heads(prompts) if self.prompt_cache else [(None, 0)] * len(prompts)
        )
        input_ids, attention_mask = self._pad_left(prompts, [length for _, length in heads])
        keys = row_keys(self.seed, next(self._calls), len(prompts), sample_keys)
        # First in the list: it must see the raw logits, before the sampler replaces them.
        recorder = SampledLogProbs(1.0 if params.greedy else params.temperature)
        processors = [recorder] if params.greedy else [recorder, KeyedSampler(keys, **_warping(params))]
        stops = (
            StopStrings(
                self.tokenizer, params.stop_strings, (input_ids.shape[0], input_ids.shape[1]), stop_ids
            )
            if params.stop_strings
            else None
        )
        with torch.no_grad():
            cache = self.prompt_cache.build(prompts, heads) if self.prompt_cache else None
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=self._generation_config(params, stop_ids),
                logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList([stops] if stops else []),
                **({"past_key_values": cache} if cache is not None else {}),
            )
            new_ids = out.sequences[:, input_ids.shape[1] :]
            log_probs = recorder.finish(new_ids).cpu()
        string_ends = stops.ends if stops else [None] * len(prompts)
        outputs = [
            _trim(row_ids.tolist(), row_lp.tolist(), set(stop_ids), string_end)
            for row_ids, row_lp, string_end in zip(new_ids.cpu(), log_probs, string_ends, strict=True)
        ]
        if self.prompt_cache and out.past_key_values is not None:
            sampled = [o.output_ids for o in outputs]
            self.prompt_cache.keep(out.past_key_values, attention_mask, prompts, sampled, heads)
        return outputs

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs aligned with batch["input_ids"] (see `token_log_probs`), no grad, on CPU; with
        share_prefix each micro-batch runs as one prefix tree (`batched_log_probs(share_prefix=True)`)."""
        return batched_log_probs(
            self.model, batch, micro_batch_size, device=self.device, share_prefix=self.share_prefix
        )

    # weight sync: the receiving end, through `self.receiver` (see `sync.endpoints`)
    update_weights = endpoints.update_weights
    receive_weight_bucket = endpoints.receive_weight_bucket
    confirm_weights = endpoints.confirm_weights
    weights_fingerprint = endpoints.received_fingerprint

    def sleep(self, level: int = 1) -> bool:
        """Free accelerator memory while training runs (colocated): the model moves to the CPU (any `level`);
        a no-op on the CPU. Returns whether the model left its device."""
        if self.device.type == "cpu":
            return False
        self.turns.clear()
        if self.decoder is not None:
            self.decoder.release()
        self.model.to("cpu")
        torch.cuda.empty_cache()
        return True

    def wake_up(self) -> None:
        """Undo `sleep`: the model returns to its device."""
        if self.device.type != "cpu":
            self.model.to(self.device)


def _warping(params: GenerationParams) -> dict[str, float | int]:
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p}


def _trim(
    ids: list[int], log_probs: list[float], stop_ids: set[int], string_end: int | None
) -> GenerationOutput:
    """One row cut at its own end: the first stop id or the token completing a stop string (kept), whichever
    comes first; what follows is the padding HF writes once a row has finished."""
    id_end = next((i + 1 for i, token in enumerate(ids) if token in stop_ids), None)
    ends = [end for end in (id_end, string_end) if end is not None]
    if not ends:
        return GenerationOutput(ids, log_probs, "length")
    end = min(ends)
    return GenerationOutput(ids[:end], log_probs[:end], "stop")


class SampledLogProbs:
    """Logits processor keeping log_softmax(raw logits / temperature)[sampled id] for every row and step.

    The id sampled at a step is only known at the next call (the last id of `input_ids`), so one [B, V]
    row of log-probs is held between calls and gathered then; `finish` gathers the last step. Memory: one
    [B, V] float32 instead of the [B, new tokens, V] logits `output_logits=True` would keep.
    Put it first in the processor list: it must see the raw logits (it returns them unchanged).
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self._pending: torch.Tensor | None = None  # [B, V] log-probs of the step whose id is not known yet
        self._steps: list[torch.Tensor] = []  # [B] per step whose id is known

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._steps.append(self._pending.gather(1, input_ids[:, -1:]).squeeze(1))
            self._pending = None  # freed before the next row is computed: one [B, V] held at a time
        self._pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_ids: torch.Tensor) -> torch.Tensor:
        """[B, N] log-probs of the N sampled ids `new_ids` ([B, N], as `generate` returned them)."""
        n = new_ids.shape[1]
        if len(self._steps) == n - 1 and self._pending is not None:  # the last step's id is known now
            self._steps.append(self._pending.gather(1, new_ids[:, -1:]).squeeze(1))
        self._pending = None
        if len(self._steps) < n:  # a step was generated without this processor seeing its logits
            raise StrategyError(
                f"Expected log-probs for all {n} sampled tokens, recorded {len(self._steps)}; SampledLogProbs "
                "must be in the logits_processor list of the generate call that produced these ids."
            )
        return torch.stack(self._steps[:n], dim=1)  # generate may undo a last, deferred step


class StopStrings(StoppingCriteria):
    """Ends a row at the sampled token whose text completes any stop string, however many tokens it spans.

    Each step the tail of every running row's own sampled ids is decoded (special tokens kept, no clean-up)
    and searched, so a stop string is found in the text the model wrote, never across the prompt. The tail
    always holds a new match: every token is at least one byte, so `window` = the longest stop string's
    UTF-8 bytes + 8 tokens. `ends[b]` is how many sampled tokens row b keeps (the token completing its stop
    string included), or None. Rows that sampled a stop id are finished (HF pads them) and not decoded again.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        stop_strings: Sequence[str],
        prompt_shape: tuple[int, int],
        stop_ids: Sequence[int] = (),
    ) -> None:
        """`prompt_shape`: [rows, width] of the left-padded prompt batch given to `generate`."""
        self.tokenizer = tokenizer
        self.stop_strings = tuple(stop_strings)
        rows, self.prompt_width = prompt_shape
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.window = max(len(s.encode("utf-8")) for s in self.stop_strings) + 8
        self.ends: list[int | None] = [None] * rows
        self._by_id: set[int] = set()  # rows that ended at a stop id

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object
    ) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.prompt_width
        rows = [b for b, end in enumerate(self.ends) if end is None and b not in self._by_id]
        if rows and generated > 0:
            tails = input_ids[rows, -min(self.window, generated) :].tolist()
            texts = self.tokenizer.batch_decode(
                tails, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            for b, tail, text in zip(rows, tails, texts, strict=True):
                if any(s in text for s in self.stop_strings):
                    self.ends[b] = generated
                elif tail[-1] in self.stop_ids:
                    self._by_id.add(b)
        done = [end is not None for end in self.ends]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]
