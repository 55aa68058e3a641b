"""`TurnCache`: the keys and values of each sequence `generate` ran (a prompt and its sampled ids), kept
between calls, so that an episode's next turn encodes only what its prompt adds.

A multi-turn prompt grows by appending ids (`roll_rollout.prompts.PromptBuilder` never re-tokenises): the
next turn's prompt is the last prompt, the ids sampled for it, then the glue and the next observation. Its
longest common prefix with a kept sequence is then the whole previous turn, and only the new ids need a
forward. hf_infer reuses a kept sequence only when the prompt starts with all of it (`match(whole=True)`): an
episode's own earlier turn. Which other sequences are kept at a moment depends on the order requests arrived,
and a reuse decided by that order would make a run's float sums depend on thread timing (exact resume,
docs/checkpoints.md). So when a history window (`max_history_turns`) moves on, the prompt starts anew and
reuses nothing kept; the batch's shared prefix still runs once.

Exact: with causal attention and positions counting real tokens, the keys and values of a prefix depend on
that prefix alone, so those computed for a kept sequence are those of the new prompt's first ids, up to float
rounding (other matmul shapes). They hold for one set of weights: the strategy clears the cache whenever
weights load. Bounded in bytes: the least recently used sequences go first, and a sequence that a later
turn extended is replaced by the extension.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import Cache, DynamicCache

__all__ = [
    "KeptSequence",
    "LayerKV",
    "TurnCache",
    "cache_from_layers",
    "cache_layers",
    "full_attention_cache",
]

LayerKV = tuple[torch.Tensor, torch.Tensor]
"""One layer's (keys, values), [kv heads, tokens, head dim] for one sequence, [rows, ...] for a batch."""


@dataclass(eq=False)
class KeptSequence:
    """The ids a forward ran over and, per layer, their keys and values."""

    ids: np.ndarray
    layers: list[LayerKV]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)


class TurnCache:
    """Kept sequences, looked up by the longest common prefix with a prompt (module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"Expected max_bytes >= 0 (0 keeps nothing), got {max_bytes}")
        self.max_bytes = max_bytes
        self._kept: OrderedDict[int, KeptSequence] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def match(self, prompt: Sequence[int], whole: bool = False) -> tuple[KeptSequence | None, int]:
        """The kept sequence sharing the most first ids with `prompt`, and how many (never the prompt's last
        id: `generate` runs that one itself); (None, 0) when none shares any. With `whole`, only sequences the
        prompt starts with in full count (an episode's own earlier turn)."""
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_length = None, 0
        for kept in self._kept.values():
            n = min(len(ids) - 1, len(kept.ids))
            differ = np.flatnonzero(ids[:n] != kept.ids[:n])
            length = int(differ[0]) if differ.size else n
            if whole and length < len(kept.ids):
                continue
            if length > best_length:
                best, best_length = kept, length
        if best is not None:
            self._kept.move_to_end(id(best))
        return best, best_length

    def keep(self, sequence: KeptSequence, replaces: KeptSequence | None = None) -> None:
        """Keep `sequence`; drop `replaces` (the sequence it extends); evict the least recently used beyond
        the budget. A sequence larger than the whole budget is not kept."""
        if replaces is not None:
            self._drop(replaces)
        size = sequence.nbytes
        if size > self.max_bytes:
            return
        while self._kept and self._bytes + size > self.max_bytes:
            self._drop(next(iter(self._kept.values())))
        self._kept[id(sequence)] = sequence
        self._bytes += size

    def clear(self) -> None:
        """Forget every kept sequence (new weights make their keys and values stale)."""
        self._kept.clear()
        self._bytes = 0

    def _drop(self, sequence: KeptSequence) -> None:
        if self._kept.pop(id(sequence), None) is not None:
            self._bytes -= sequence.nbytes


def cache_layers(cache: Cache) -> list[LayerKV]:
    """Each layer's (keys, values) of a transformers cache, [rows, kv heads, tokens, head dim]."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # transformers before layer objects


def full_attention_cache(cache: Cache) -> bool:
    """Whether every layer of `cache` keeps all positions (no sliding window, no recurrent state): only
    then do kept keys and values stand for a whole prefix."""
    if not isinstance(cache, DynamicCache):
        return False
    sliding = getattr(cache, "is_sliding", None)
    return not any(sliding) if isinstance(sliding, list | tuple) else True


def cache_from_layers(layers: Sequence[LayerKV]) -> DynamicCache:
    """A `DynamicCache` holding `layers` ([rows, kv heads, tokens, head dim] each)."""
    cache = DynamicCache()
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache
