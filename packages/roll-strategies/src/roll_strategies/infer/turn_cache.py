"""`TurnCache`: the keys and values of each sequence `generate` ran (a prompt and its sampled ids), kept
between calls, so that an episode's next turn encodes only what its prompt adds.

A multi-turn prompt grows by appending ids (`roll_rollout.prompts.PromptBuilder` never re-tokenises): the
next turn's prompt is the last prompt, the ids sampled for it, then the glue and the next observation, so it
starts with the whole previous turn, and only the new ids need a forward. A kept sequence is reused only when
the prompt starts with all of it: an episode's own earlier turn. Other kept sequences may share a first part
(a system turn), but which of them are kept at a moment depends on the order requests arrived, and a reuse
decided by that order would make a run's float sums depend on thread timing (exact resume,
docs/checkpoints.md). So when a history window (`max_history_turns`) moves on, the prompt starts anew and
reuses nothing kept; the batch's shared prefix still runs once.

Found by fingerprint, not by scanning: each kept sequence is filed under a 64-bit fingerprint of its ids, and a
prompt's fingerprints of every prefix, computed in one vectorised pass, are looked up together; a hit is
confirmed id for id. A lookup costs about the prompt's length, however many sequences are kept (a validation
pass keeps one per episode).

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
from functools import cached_property

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
    "prefix_fingerprints",
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

    @cached_property
    def fingerprint(self) -> int:
        """`prefix_fingerprints(ids)` of the whole sequence: the key it is filed under."""
        return int(prefix_fingerprints(self.ids)[-1])


_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd, so no power of it is 0 modulo 2**64
_powers = np.ones(1, dtype=np.uint64)


def prefix_fingerprints(ids: np.ndarray) -> np.ndarray:
    """[len(ids)] uint64: entry i fingerprints ids[: i + 1], sum over j <= i of (ids[j] + 1) * BASE**j modulo
    2**64 (numpy's unsigned arithmetic wraps). Equal prefixes give equal entries; a shared entry is only a
    candidate, confirmed by comparing the ids."""
    global _powers
    if len(_powers) < len(ids):
        grown = np.full(max(len(ids), 2 * len(_powers)), _BASE, dtype=np.uint64)
        grown[0] = 1
        _powers = np.cumprod(grown, dtype=np.uint64)
    return np.cumsum((ids.astype(np.uint64) + np.uint64(1)) * _powers[: len(ids)], dtype=np.uint64)


class TurnCache:
    """Kept sequences, each found by a prompt that starts with all of it (module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"Expected max_bytes >= 0 (0 keeps nothing), got {max_bytes}")
        self.max_bytes = max_bytes
        # by fingerprint, least recently used first
        self._kept: OrderedDict[int, KeptSequence] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def match(self, prompt: Sequence[int]) -> tuple[KeptSequence | None, int]:
        """The longest kept sequence `prompt` starts with in full, and its length (never the prompt's last
        id: `generate` runs that one itself); (None, 0) when there is none."""
        if not self._kept or len(prompt) < 2:
            return None, 0
        ids = np.asarray(prompt, dtype=np.int64)[:-1]
        prints = prefix_fingerprints(ids)
        filed = np.fromiter(self._kept.keys(), dtype=np.uint64, count=len(self._kept))
        for end in np.flatnonzero(np.isin(prints, filed))[::-1]:
            key = int(prints[end])
            kept = self._kept[key]
            if len(kept.ids) == end + 1 and np.array_equal(kept.ids, ids[: end + 1]):
                self._kept.move_to_end(key)
                return kept, end + 1
        return None, 0

    def keep(self, sequence: KeptSequence, replaces: KeptSequence | None = None) -> None:
        """Keep `sequence` (in place of a kept one with the same ids); drop `replaces` (the sequence it
        extends); evict the least recently used beyond the budget. A sequence larger than the whole budget is
        not kept."""
        for stale in (replaces, self._kept.get(sequence.fingerprint)):
            if stale is not None:
                self._drop(stale)
        size = sequence.nbytes
        if size > self.max_bytes:
            return
        while self._kept and self._bytes + size > self.max_bytes:
            self._drop(next(iter(self._kept.values())))
        self._kept[sequence.fingerprint] = sequence
        self._bytes += size

    def clear(self) -> None:
        """Forget every kept sequence (new weights make their keys and values stale)."""
        self._kept.clear()
        self._bytes = 0

    def _drop(self, sequence: KeptSequence) -> None:
        if self._kept.get(sequence.fingerprint) is sequence:
            del self._kept[sequence.fingerprint]
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
