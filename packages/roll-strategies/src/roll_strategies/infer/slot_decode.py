"""`SlotDecoder`: hf_infer's static-cache decoding with slot refill, the GPU path without vLLM.

A `generate` call's prompts fill up to `slots` slots of a `SlotKVCache`; each decode step runs every slot in
one forward of fixed shape ([slots, 1] ids, one cache length), whatever position each slot is at, and a slot
whose sequence finished takes the next waiting prompt (continuous batching within the call). HF `generate`
instead grows a dynamic cache by one column a step (new shapes every step: no CUDA graph, a launch-bound loop
on a GPU) and runs finished rows until the whole batch ends.

Exact against the `generate` path: the same positions (a row's own tokens counted from 0), the same keyed
sampler (`sampling.keyed_pick` on the same warpers, row b's draw at its own decode step), the same log-probs
(log_softmax(raw logits / temperature) of the sampled id, temperature 1 when greedy), the same stop ids and
stop strings; tokens and log-probs equal up to float rounding (other matmul shapes).

Prefill: each admitted prompt's rest (what no kept turn covers) runs in one left-padded forward with the other
prompts admitted at that step, in chunks of `PREFILL_TOKENS`; copies of one prompt (a group's samples) run once
and the others copy its columns. Shared prefixes: a prompt that starts with a sequence an earlier call kept
(`TurnCache`, under share_prefix) copies its keys and values instead of recomputing them, and every finished
sequence is kept the same way. What it does not share: the common prefix of different prompts (a system turn)
runs once per distinct prompt, where the `generate` path's `PromptCache` runs it once per batch.

Refused (`static_decode_refusal`): models with a sliding-window layer (the buffers keep every position) and
attention kernels that ignore an additive 4D mask (flash-attention).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from roll_strategies.compute.attention_windows import attention_windows, describe_windows
from roll_strategies.compute.logprobs import _supports_logits_to_keep
from roll_strategies.errors import StrategyError
from roll_strategies.infer.prompt_cache import MIN_SHARED_TOKENS
from roll_strategies.infer.sampling import key_array, keyed_pick, sampling_warpers, step_uniforms
from roll_strategies.infer.slot_cache import DecodeGraph, SlotKVCache, visibility_mask
from roll_strategies.infer.turn_cache import KeptSequence, TurnCache
from roll_strategies.protocols import check_prompts

if TYPE_CHECKING:
    from roll_strategies.protocols import GenerationParams

__all__ = [
    "DECODE_KEYS",
    "DECODE_MODES",
    "DEFAULT_SLOTS",
    "Decoded",
    "SlotDecoder",
    "decode_settings",
    "slot_decoder",
    "static_decode_refusal",
]

_LOG = logging.getLogger(__name__)

DECODE_MODES = ("auto", "generate", "static")
"""hf_infer's decoding loops: HF `generate`, the `SlotDecoder`, or auto (static on CUDA, generate on the CPU)."""
DEFAULT_SLOTS = 64
"""Sequences decoded at once by default; more prompts wait for a slot."""
CACHE_ROUND = 64
"""Cache lengths are rounded up to a multiple of this, so calls of similar lengths share decode shapes."""
PREFILL_TOKENS = 16384
"""Padded prompt tokens per prefill forward."""


class Decoded(NamedTuple):
    """One prompt's output, in `GenerationOutput`'s fields."""

    output_ids: list[int]
    log_probs: list[float]
    finish_reason: Literal["stop", "length"]


DECODE_KEYS = ("decode", "decode_slots", "decode_graphs")
"""The keys of hf_infer's `strategy_config`."""


def decode_settings(strategy_config: Mapping[str, Any] | None) -> tuple[str, int, bool]:
    """(decode, decode_slots, decode_graphs) from hf_infer's `strategy_config` (defaults: "auto",
    `DEFAULT_SLOTS`, False); any other key is refused."""
    config = dict(strategy_config or {})
    unknown = sorted(set(config) - set(DECODE_KEYS))
    if unknown:
        raise StrategyError(
            f"Expected only {', '.join(map(repr, DECODE_KEYS))} in hf_infer's strategy_config, got {unknown}; "
            "drop them (engine arguments belong to the vllm backend)."
        )
    return (
        str(config.get("decode", "auto")),
        int(config.get("decode_slots", DEFAULT_SLOTS)),
        bool(config.get("decode_graphs", False)),
    )


def static_decode_refusal(model: PreTrainedModel) -> str | None:
    """Why the slot decoder cannot run `model` exactly, or None when it can."""
    if any(window is not None for window in attention_windows(model).values()):
        return f"a sliding-window layer ({describe_windows(model)}): the static buffers keep every position"
    kernel = getattr(model.config, "_attn_implementation", None)
    if kernel not in ("sdpa", "eager"):
        return (
            f"attention kernel {kernel!r} ignores the additive 4D masks the slots need (sdpa or eager do not)"
        )
    return None


def slot_decoder(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    mode: str,
    slots: int,
    graphs: bool,
    turns: TurnCache,
) -> SlotDecoder | None:
    """The decoder `mode` selects for `model` on its device (None: HF `generate`); "static" on a model the
    slots cannot run exactly is refused, "auto" falls back to `generate` there and logs why. `graphs`: replay
    the decode step as a CUDA graph (CUDA only; refused elsewhere)."""
    if graphs and model.device.type != "cuda":
        raise StrategyError(
            f"Expected a CUDA model for decode_graphs=true, got one on {model.device}; set decode_graphs "
            "to false on the CPU."
        )
    if mode not in DECODE_MODES:
        raise StrategyError(f"Expected decode in {DECODE_MODES}, got {mode!r}.")
    if slots < 1:
        raise StrategyError(f"Expected decode_slots >= 1, got {slots}.")
    if mode == "generate" or (mode == "auto" and model.device.type != "cuda"):
        return None
    refusal = static_decode_refusal(model)
    if refusal is None:
        return SlotDecoder(model, tokenizer, slots, turns, graphs=graphs)
    if mode == "static":
        raise StrategyError(
            f"Expected a model the static decoder runs exactly for decode='static', got {type(model).__name__} "
            f"with {refusal}; set decode to 'generate' (or 'auto')."
        )
    _LOG.warning("hf_infer decodes with HF generate on %s: %s.", type(model).__name__, refusal)
    return None


@dataclass
class _Row:
    """One prompt of the call while it is decoded."""

    prompt: Sequence[int]
    head: tuple[KeptSequence | None, int]
    ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)


class SlotDecoder:
    """Token ids in, token ids and log-probs out, over a static cache of slots (module docstring)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        slots: int,
        turns: TurnCache,
        *,
        graphs: bool = False,
    ) -> None:
        self.model, self.tokenizer, self.slots, self.turns = model, tokenizer, slots, turns
        self.pad_id = int(tokenizer.pad_token_id)
        self._keep_last = {"logits_to_keep": 1} if _supports_logits_to_keep(type(model)) else {}
        self.graphs = graphs
        self._graph: DecodeGraph | None = None  # with its cache, reused by calls of the same shape

    def release(self) -> None:
        """Drop the captured graph and its cache (the model is leaving its device, or its storage moves)."""
        self._graph = None

    def _cache(self, slots: int, length: int) -> SlotKVCache:
        if not self.graphs:
            return SlotKVCache(self.model, slots, length)
        if self._graph is None or self._graph.shape != (slots, length):
            self._graph = None  # free the old buffers before the new ones
            self._graph = DecodeGraph(self._forward, SlotKVCache(self.model, slots, length))
        return self._graph.cache

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        keys: Sequence[int],
        stop_ids: Sequence[int],
    ) -> list[Decoded]:
        """Every prompt's continuation; row b samples with key `keys[b]` (`sampling.row_keys`)."""
        check_prompts(prompts)
        rows = [_Row(p, self._head(p)) for p in prompts]  # heads before any keep, as the generate path
        slots = min(self.slots, len(prompts))
        length = -(-(max(map(len, prompts)) + params.max_new_tokens) // CACHE_ROUND) * CACHE_ROUND
        cache = self._cache(slots, length)
        step = _Stepper(params, key_array(keys), frozenset(int(i) for i in stop_ids), self.tokenizer)
        owner = [-1] * slots  # the row each slot decodes, -1: free
        position = np.zeros(slots, dtype=np.int64)  # tokens in each slot's cache
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        logits = torch.zeros((slots, vocab), device=self.model.device)
        waiting = deque(range(len(prompts)))
        done: dict[int, Decoded] = {}
        while True:
            free = [s for s in range(slots) if owner[s] < 0]
            if free and waiting:
                admitted = [(s, waiting.popleft()) for s in free[: len(waiting)]]
                for s, r in admitted:
                    owner[s], position[s] = r, len(rows[r].prompt)
                self._prefill(cache, [(s, rows[r]) for s, r in admitted], logits)
            active = [s for s in range(slots) if owner[s] >= 0]
            if not active:
                break
            tokens = step.sample(logits[active], [owner[s] for s in active], rows)
            for s, token in zip(active, tokens, strict=True):
                finish = step.finish(rows[owner[s]], token)
                if finish is not None:
                    done[owner[s]] = self._finish(cache, s, rows[owner[s]], finish)
                    owner[s] = -1
            if any(o >= 0 for o in owner):
                self._decode(cache, owner, position, rows, logits)
        return [done[r] for r in range(len(prompts))]

    def _head(self, prompt: Sequence[int]) -> tuple[KeptSequence | None, int]:
        kept, length = self.turns.match(prompt)
        return (kept, length) if kept is not None and length >= MIN_SHARED_TOKENS else (None, 0)

    def _prefill(self, cache: SlotKVCache, admitted: list[tuple[int, _Row]], logits: torch.Tensor) -> None:
        """Each admitted prompt's cache columns and next-token logits: its kept head copied, its rest run (once
        per distinct prompt, `PREFILL_TOKENS` at a time), copies of a prompt filled from its first slot."""
        first: dict[tuple[int, ...], tuple[int, _Row]] = {}
        copies: dict[int, list[int]] = {}
        for slot, row in admitted:
            source = first.setdefault(tuple(row.prompt), (slot, row))[0]
            if source != slot:
                copies.setdefault(source, []).append(slot)
        distinct = list(first.values())
        for slot, row in distinct:
            if row.head[0] is not None:
                cache.copy_in(slot, row.head[0].layers, row.head[1])
        chunk: list[tuple[int, _Row]] = []
        for item in sorted(distinct, key=lambda item: len(item[1].prompt) - item[1].head[1]):
            width = len(item[1].prompt) - item[1].head[1]
            if chunk and (len(chunk) + 1) * width > PREFILL_TOKENS:
                self._prefill_forward(cache, chunk, logits)
                chunk = []
            chunk.append(item)
        self._prefill_forward(cache, chunk, logits)
        for slot, row in distinct:
            if slot in copies:
                cache.copy_slot(slot, copies[slot], len(row.prompt))
                logits[copies[slot]] = logits[slot].clone()

    def _prefill_forward(
        self, cache: SlotKVCache, chunk: list[tuple[int, _Row]], logits: torch.Tensor
    ) -> None:
        """One forward of the chunk's rests, left-padded to one width (so every row's last id is the last
        column): real query j of row b writes column head + its index in the rest; padding writes scratch."""
        device = self.model.device
        width = max(len(row.prompt) - row.head[1] for _, row in chunk)
        ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        cols = torch.full((len(chunk), width), cache.scratch, dtype=torch.long)
        limits = torch.full((len(chunk), width), -1, dtype=torch.long)
        for b, (_, row) in enumerate(chunk):
            head, rest = row.head[1], list(row.prompt[row.head[1] :])
            ids[b, width - len(rest) :] = torch.tensor(rest)
            cols[b, width - len(rest) :] = torch.arange(head, head + len(rest))
            limits[b, width - len(rest) :] = torch.arange(head, head + len(rest))
        slots = torch.tensor([slot for slot, _ in chunk], device=device)
        logits[slots] = self._forward(cache, slots, ids.to(device), cols.to(device), limits.to(device))

    def _decode(
        self,
        cache: SlotKVCache,
        owner: list[int],
        position: np.ndarray,
        rows: list[_Row],
        logits: torch.Tensor,
    ) -> None:
        """One fixed-shape step of every slot: an active slot feeds its last sampled id at its position; a free
        slot feeds padding into the scratch column."""
        active = np.array([o >= 0 for o in owner])
        last = [rows[o].ids[-1] if o >= 0 else self.pad_id for o in owner]
        at = np.where(active, position, cache.scratch)
        limits = np.where(active, position, -1)
        device = self.model.device
        inputs = (
            torch.tensor(last, device=device).unsqueeze(1),
            torch.from_numpy(at).to(device).unsqueeze(1),
            torch.from_numpy(limits).to(device).unsqueeze(1),
        )
        if self._graph is not None:
            logits.copy_(self._graph.run(*inputs))
        else:
            logits.copy_(self._forward(cache, None, *inputs))
        position += active

    def _forward(
        self,
        cache: SlotKVCache,
        slots: torch.Tensor | None,
        ids: torch.Tensor,
        cols: torch.Tensor,
        limits: torch.Tensor,
    ) -> torch.Tensor:
        """[rows, vocab] float32 logits of each row's last column, its keys and values written to the cache."""
        cache.target(slots, cols)
        out = self.model(
            input_ids=ids,
            attention_mask=visibility_mask(limits, cache.width, cache.scratch, self.model.dtype),
            position_ids=limits.clamp(min=0),
            past_key_values=cache,
            use_cache=True,
            **self._keep_last,
        )
        return out.logits[:, -1].float()

    def _finish(self, cache: SlotKVCache, slot: int, row: _Row, reason: Literal["stop", "length"]) -> Decoded:
        """The row's output; its sequence kept for later calls (prompt and sampled ids but the last)."""
        if self.turns.max_bytes:
            fed = len(row.prompt) + len(row.ids) - 1
            ids = np.asarray([*row.prompt, *row.ids[:-1]], dtype=np.int64)
            self.turns.keep(KeptSequence(ids, cache.slot_layers(slot, fed)), replaces=row.head[0])
        return Decoded(row.ids, row.log_probs, reason)


class _Stepper:
    """Sampling and stopping of the rows: keyed draws at each row's own step, stop ids and stop strings."""

    def __init__(
        self,
        params: GenerationParams,
        keys: np.ndarray,
        stop_ids: frozenset[int],
        tokenizer: PreTrainedTokenizerBase,
    ) -> None:
        self.params, self.keys, self.stop_ids, self.tokenizer = params, keys, stop_ids, tokenizer
        self.temperature = 1.0 if params.greedy else params.temperature
        self.warpers = (
            []
            if params.greedy
            else sampling_warpers(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        )
        # the tail always holds a new match: every token is at least one byte
        self.window = max((len(s.encode("utf-8")) for s in params.stop_strings), default=0) + 8

    def sample(self, logits: torch.Tensor, owners: list[int], rows: list[_Row]) -> list[int]:
        """Each active slot's next id, its log-prob appended to its row."""
        if self.params.greedy:
            picked = logits.argmax(dim=-1, keepdim=True)
        else:
            scores = logits
            for warp in self.warpers:
                scores = warp(None, scores)
            steps = np.array([len(rows[o].ids) for o in owners], dtype=np.uint64)
            picked = keyed_pick(scores, step_uniforms(self.keys[owners], steps))
        log_probs = torch.log_softmax(logits / self.temperature, dim=-1).gather(1, picked).squeeze(1)
        tokens = picked.squeeze(1).tolist()
        for owner, token, log_prob in zip(owners, tokens, log_probs.tolist(), strict=True):
            rows[owner].ids.append(token)
            rows[owner].log_probs.append(log_prob)
        return tokens

    def finish(self, row: _Row, token: int) -> Literal["stop", "length"] | None:
        """Whether the row ends at its new `token`: a stop id, a completed stop string, or max_new_tokens."""
        if token in self.stop_ids:
            return "stop"
        if self.params.stop_strings:
            text = self.tokenizer.decode(
                row.ids[-self.window :], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if any(s in text for s in self.params.stop_strings):
                return "stop"
        return "length" if len(row.ids) >= self.params.max_new_tokens else None
