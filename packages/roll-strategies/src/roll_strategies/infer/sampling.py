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

import numpy as np
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from roll_strategies.errors import StrategyError

__all__ = ["KeyedSampler", "mix_key", "row_keys", "step_uniforms"]

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


def step_uniforms(keys: np.ndarray, step: int) -> np.ndarray:
    """Uniforms in [0, 1) (float64), one per key, for decode step `step`: splitmix64 of (key, step)."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        z = keys ^ np.uint64(_splitmix64(step))
        z = z + np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class KeyedSampler:
    """Logits processor that samples row b with the uniforms of `keys[b]` (use with `do_sample=False`)."""

    def __init__(self, keys: Sequence[int], *, temperature: float, top_k: int, top_p: float) -> None:
        self._keys = np.array([int(k) & _MASK for k in keys], dtype=np.uint64)
        self._warpers: list[object] = []
        if temperature != 1.0:
            self._warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            self._warpers.append(TopKLogitsWarper(top_k=top_k))
        if top_p < 1.0:
            self._warpers.append(TopPLogitsWarper(top_p=top_p))
        self._step = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """[B, V] scores -> [B, V] with 0 at each row's sampled token and -inf elsewhere."""
        if scores.shape[0] != len(self._keys):
            raise ValueError(f"KeyedSampler has {len(self._keys)} keys for a batch of {scores.shape[0]} rows")
        for warp in self._warpers:
            scores = warp(input_ids, scores)  # type: ignore[operator]
        cdf = torch.softmax(scores.float(), dim=-1).cumsum(dim=-1)
        # u in (0, 1]; the first index whose cumulative mass reaches u * total is token i with probability
        # p_i. A token the warpers removed adds no mass, so it is never the first to reach the target, and a
        # target rounded up to the total lands on the last token that has mass.
        u = torch.from_numpy(1.0 - step_uniforms(self._keys, self._step)).to(cdf.device, cdf.dtype)
        picked = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1))
        picked = picked.clamp_(max=scores.shape[-1] - 1)
        self._step += 1
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, picked, 0.0)
