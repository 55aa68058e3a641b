"""Keyed sampling: a row's tokens depend on its own key and logits only, never on the rows it is batched with.

A shared torch generator hands out random numbers in batch order, so when a server batches concurrent
requests the tokens a request gets depend on which other requests shared its batch, and in which order:
timing. Here every row draws its uniforms from a counter-based hash of (row key, decode step), so a
request's tokens are a function of its key and its logits alone.

`KeyedSampler` is a Hugging Face logits processor used with greedy decoding: it applies the sampling
warpers (temperature, top-k, top-p, in the order `generate` applies them), draws one token per row by
inverse-CDF sampling, and leaves only that token finite, so the argmax is the sampled token. The raw logits
(and the log-probs computed from them) are untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from roll_strategies.errors import StrategyError

__all__ = [
    "KeyedSampler",
    "key_array",
    "keyed_pick",
    "mix_key",
    "row_keys",
    "sampling_warpers",
    "step_uniforms",
]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _splitmix64(x: int) -> int:
    z = (x + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _C1) & _MASK
    z = ((z ^ (z >> 27)) * _C2) & _MASK
    return z ^ (z >> 31)


def mix_key(parts: Iterable[int]) -> int:
    """A 63-bit key from any ints (order matters); fits an int64 and a vLLM request seed."""
    h = 0x243F6A8885A308D3
    for part in parts:
        h = _splitmix64(h ^ (int(part) & _MASK))
    return h >> 1


def row_keys(seed: int, call: int, count: int, sample_keys: Sequence[int | None] | None) -> list[int]:
    """The sampling key of each of `count` rows: (seed, its sample key), or (seed, call, row) without one."""
    keys = list(sample_keys) if sample_keys is not None else [None] * count
    if len(keys) != count:
        raise StrategyError(f"Expected one sample key per prompt ({count}), got {len(keys)}.")
    return [
        mix_key((seed, 0, call, row)) if key is None else mix_key((seed, 1, key))
        for row, key in enumerate(keys)
    ]


def _splitmix64_array(x: np.ndarray) -> np.ndarray:
    """`_splitmix64` of every entry (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
        return z ^ (z >> np.uint64(31))


def key_array(keys: Sequence[int]) -> np.ndarray:
    """Sampling keys as the uint64 array `step_uniforms` takes."""
    return np.array([int(k) & _MASK for k in keys], dtype=np.uint64)


def step_uniforms(keys: np.ndarray, step: int | np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) (float64), one per key, for decode step `step` (one for all keys, or one per key):
    splitmix64 of (key, step)."""
    mixed = np.uint64(_splitmix64(step)) if isinstance(step, int) else _splitmix64_array(np.asarray(step))
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        z = keys ^ mixed
        z = z + np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def sampling_warpers(*, temperature: float, top_k: int, top_p: float) -> list[Any]:
    """The warpers `generate` would apply for these settings, in its order (temperature, top-k, top-p)."""
    warpers: list[Any] = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    return warpers


def keyed_pick(scores: torch.Tensor, uniforms: np.ndarray) -> torch.Tensor:
    """[B, 1] ids: row b's token by inverse-CDF sampling of softmax(scores[b]) at 1 - uniforms[b]."""
    cdf = torch.softmax(scores.float(), dim=-1).cumsum(dim=-1)
    # u in (0, 1]; the first index whose cumulative mass reaches u * total is token i with probability
    # p_i. A token the warpers removed adds no mass, so it is never the first to reach the target, and a
    # target rounded up to the total lands on the last token that has mass.
    u = torch.from_numpy(1.0 - uniforms).to(cdf.device, cdf.dtype)
    picked = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1))
    return picked.clamp_(max=scores.shape[-1] - 1)


class KeyedSampler:
    """Logits processor that samples row b with the uniforms of `keys[b]` (use with `do_sample=False`)."""

    def __init__(self, keys: Sequence[int], *, temperature: float, top_k: int, top_p: float) -> None:
        self._keys = key_array(keys)
        self._warpers = sampling_warpers(temperature=temperature, top_k=top_k, top_p=top_p)
        self._step = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """[B, V] scores -> [B, V] with 0 at each row's sampled token and -inf elsewhere."""
        if scores.shape[0] != len(self._keys):
            raise ValueError(f"KeyedSampler has {len(self._keys)} keys for a batch of {scores.shape[0]} rows")
        for warp in self._warpers:
            scores = warp(input_ids, scores)
        picked = keyed_pick(scores, step_uniforms(self._keys, self._step))
        self._step += 1
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, picked, 0.0)
