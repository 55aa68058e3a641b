"""`PromptCache`: the KV cache a `generate` call continues from under `share_prefix` (hf_infer), so that each
prompt id already computed is computed no more.

Each prompt's first ids, its "head", come from one of three sources. The first is a sequence an earlier call
ran, kept in a `TurnCache`: an episode's previous turn, its prompt and sampled ids. The second is the prefix
every prompt of the batch shares, such as a system turn or an instruction, run once in one row. A head is used
when it has at least `MIN_SHARED_TOKENS` ids. The third is for a batch that mixes both: a prompt without a kept
head (a new episode beside next turns) is encoded first, in a batch of its own, and its ids but the last become
its head. Otherwise its whole prompt would be a rest, and every row's rest, in the forward and at each decoding
step, would be that wide. The rest of each distinct prompt, but its last id, is encoded once on top of the
heads. The cache rows are then repeated for the prompt's samples, and `generate` runs each row's last prompt
id first.

Layout: each prompt is laid out as [padding][head][padding][rest]. The padding is masked, and positions count
real tokens only, as `generate` derives them from the attention mask. So a row's keys and values are those of
its prompt alone, up to float rounding (other matmul shapes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import Cache, DynamicCache, PreTrainedModel

from roll_strategies.compute.logprobs import _supports_logits_to_keep
from roll_strategies.infer.turn_cache import (
    KeptSequence,
    LayerKV,
    TurnCache,
    cache_from_layers,
    cache_layers,
    full_attention_cache,
)

__all__ = ["MIN_SHARED_TOKENS", "TURN_CACHE_BYTES", "Head", "PromptCache", "common_prefix_length", "pad_left"]

MIN_SHARED_TOKENS = 8
"""A batch's prompts share their common prefix through one cache row when it is at least this long; a prompt
reuses a kept sequence's keys and values when they share at least this many first ids."""

TURN_CACHE_BYTES = 1 << 30
"""Default budget of the kept sequences' keys and values (`TurnCache`): 1 GiB holds about 23k tokens of
SmolLM2-135M in float32, 90k of Qwen2.5-0.5B in bfloat16."""

Head = tuple[KeptSequence | None, int]
"""Where a prompt's first ids' keys and values come from, and how many: a kept sequence, or (None, n) the
batch's shared prefix (n = 0: none)."""


def pad_left(
    prompts: Sequence[Sequence[int]], heads: Sequence[int], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and attention mask [B, width]: each prompt's first heads[b] ids right-aligned in the first
    max(heads) columns and its rest right-aligned in the others, [padding][head][padding][rest]; with no
    heads, plain left padding."""
    head_width = max(heads)
    width = head_width + max(len(p) - h for p, h in zip(prompts, heads, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, (prompt, head) in enumerate(zip(prompts, heads, strict=True)):
        ids[row, head_width - head : head_width] = torch.as_tensor(list(prompt[:head]), dtype=torch.long)
        ids[row, width - len(prompt) + head :] = torch.as_tensor(list(prompt[head:]), dtype=torch.long)
        mask[row, head_width - head : head_width] = 1
        mask[row, width - len(prompt) + head :] = 1
    return ids.to(device), mask.to(device)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many first ids every prompt of the batch shares, when there are at least `MIN_SHARED_TOKENS` of
    them and more than one prompt, else 0; never a whole prompt (its last id is `generate`'s first input)."""
    if len(prompts) < 2:
        return 0
    shortest = min(len(p) for p in prompts) - 1
    first = prompts[0]
    length = 0
    while length < shortest and all(p[length] == first[length] for p in prompts):
        length += 1
    return length if length >= MIN_SHARED_TOKENS else 0


class PromptCache:
    """Heads, the cache built on them, and the sequences kept for later calls (module docstring)."""

    def __init__(self, model: PreTrainedModel, pad_id: int, turn_cache_bytes: int) -> None:
        self.model = model
        self.pad_id = pad_id
        # Heads need every layer's cache to hold all positions; a windowed model shares repeated prompts only.
        self.heads_ok = full_attention_cache(_model_cache(model))
        self.turns = TurnCache(turn_cache_bytes if self.heads_ok else 0)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def heads(self, prompts: Sequence[Sequence[int]]) -> list[Head]:
        """Each prompt's head: the longest kept sequence it starts with in full, when at least
        `MIN_SHARED_TOKENS` and more than the batch's shared prefix, else that prefix (`common_prefix_length`);
        when some prompts have a kept head, the others' own ids but the last, encoded now (`_encode`); none on a
        model whose caches do not hold every position."""
        if not self.heads_ok:
            return [(None, 0)] * len(prompts)
        shared = common_prefix_length(prompts)
        by_prompt: dict[tuple[int, ...], Head] = {}  # a group's copies of one prompt look it up once
        for prompt in map(tuple, prompts):
            if prompt not in by_prompt:
                kept, length = self.turns.match(prompt)
                use_kept = kept is not None and length >= MIN_SHARED_TOKENS and length > shared
                by_prompt[prompt] = (kept, length) if use_kept else (None, shared)
        # Beside kept heads, a prompt without one would make every row's rest as wide as its whole prompt
        # (the rest forward and each decoding step would run that many columns for every row): such prompts
        # are encoded now, in a batch of their own, and join as heads too.
        fresh = [prompt for prompt, (kept, _) in by_prompt.items() if kept is None and len(prompt) > 1]
        if fresh and len(fresh) < len(by_prompt):
            for prompt, sequence in zip(fresh, self._encode(fresh), strict=True):
                by_prompt[prompt] = (sequence, len(sequence.ids))
        return [by_prompt[tuple(p)] for p in prompts]

    def build(self, prompts: Sequence[Sequence[int]], heads: Sequence[Head]) -> Cache | None:
        """The KV cache of every prompt but its last token, laid out as `pad_left(prompts, heads)`: the heads'
        columns filled from their kept sequences or from one forward of the batch's shared prefix, each
        distinct prompt's rest encoded once on top, the rows repeated for each prompt of the batch; None when
        there is nothing to share (no head, no repeated prompt).

        Distinct prompts are laid out as the batch is (the widest rest and the widest head are among them), so
        the cache columns line up with the batch `generate` gets, and `generate` runs the last column itself.
        """
        first_row: dict[tuple[int, ...], int] = {}
        rows = [first_row.setdefault(tuple(p), len(first_row)) for p in prompts]
        distinct_heads = [heads[rows.index(r)] for r in range(len(first_row))]
        lengths = [length for _, length in distinct_heads]
        if (len(first_row) == len(prompts) and not any(lengths)) or max(len(p) for p in prompts) < 2:
            return None
        cache, _ = self._forward(list(first_row), distinct_heads)
        cache.reorder_cache(torch.tensor(rows, dtype=torch.long, device=self.device))
        return cache

    @torch.no_grad()
    def _forward(self, prompts: Sequence[Sequence[int]], heads: Sequence[Head]) -> tuple[Cache, torch.Tensor]:
        """The cache of every prompt but its last id, laid out as `pad_left(prompts, heads)` without its last
        column: the heads' columns filled (`_head_cache`), the rest encoded in one forward on top; and that
        layout's attention mask."""
        lengths = [length for _, length in heads]
        ids, mask = pad_left(prompts, lengths, self.pad_id, self.device)
        ids, mask = ids[:, :-1], mask[:, :-1]
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as `generate` derives them
        head_width = max(lengths)
        cache = self._head_cache(prompts, heads) if head_width else None
        if ids.shape[1] > head_width:
            cache = self.model(
                input_ids=ids[:, head_width:],
                attention_mask=mask,
                position_ids=positions[:, head_width:],
                past_key_values=cache,
                use_cache=True,
                **self._last_logits_only(),
            ).past_key_values
        assert cache is not None
        return cache, mask

    def _encode(self, prompts: Sequence[Sequence[int]]) -> list[KeptSequence]:
        """Each prompt's ids but its last, with their keys and values, from one forward of distinct prompts
        (their common prefix run once, `common_prefix_length`)."""
        shared = common_prefix_length(prompts)
        cache, mask = self._forward(prompts, [(None, shared)] * len(prompts))
        layers = cache_layers(cache)
        return [
            KeptSequence(
                np.asarray(prompt[:-1], dtype=np.int64), _row_layers(layers, row, mask[row].nonzero()[:, 0])
            )
            for row, prompt in enumerate(prompts)
        ]

    def keep(
        self,
        cache: Cache,
        attention_mask: torch.Tensor,
        prompts: Sequence[Sequence[int]],
        sampled: Sequence[Sequence[int]],
        heads: Sequence[Head],
    ) -> None:
        """Keep each row's sequence (its prompt and sampled ids but the last, which no forward ran) with its
        keys and values, gathered from `generate`'s final cache (`attention_mask` is the prompts' one); a
        row's sequence replaces the kept one its head came from (which its prompt extends in full)."""
        if not self.turns.max_bytes:
            return
        layers = cache_layers(cache)
        width = attention_mask.shape[1]
        for row, (prompt, ids, (kept, _)) in enumerate(zip(prompts, sampled, heads, strict=True)):
            fed = len(ids) - 1
            columns = torch.cat(
                [
                    attention_mask[row].nonzero().squeeze(-1),
                    torch.arange(width, width + fed, device=attention_mask.device),
                ]
            )
            sequence = KeptSequence(
                np.asarray([*prompt, *ids[:-1]], dtype=np.int64), _row_layers(layers, row, columns)
            )
            self.turns.keep(sequence, replaces=kept)

    def _head_cache(self, prompts: Sequence[Sequence[int]], heads: Sequence[Head]) -> Cache:
        """The heads' keys and values, each row's right-aligned in max(head lengths) columns (zeros before it,
        masked): sliced from its kept sequence, or the batch's shared prefix run once in one row."""
        width = max(length for _, length in heads)
        shared = next((length for kept, length in heads if kept is None and length), 0)
        prefix = self._one_row_layers(prompts[0][:shared]) if shared else None
        sources = [kept.layers if kept is not None else prefix if length else None for kept, length in heads]
        lengths = [length for _, length in heads]
        template = next(layers for layers in sources if layers is not None)
        return cache_from_layers(
            [
                (
                    _right_aligned([s[index][0] if s else None for s in sources], lengths, width, keys),
                    _right_aligned([s[index][1] if s else None for s in sources], lengths, width, values),
                )
                for index, (keys, values) in enumerate(template)
            ]
        )

    def _one_row_layers(self, ids: Sequence[int]) -> list[LayerKV]:
        """Each layer's keys and values of one forward over `ids`, [kv heads, tokens, head dim]."""
        batch = torch.as_tensor([list(ids)], dtype=torch.long, device=self.device)
        cache = self.model(input_ids=batch, use_cache=True, **self._last_logits_only()).past_key_values
        return [(keys[0], values[0]) for keys, values in cache_layers(cache)]

    def _last_logits_only(self) -> dict[str, int]:
        # the cache is what is wanted: the lm head runs on one position, where the model allows it
        return {"logits_to_keep": 1} if _supports_logits_to_keep(type(self.model)) else {}


def _row_layers(layers: Sequence[LayerKV], row: int, columns: torch.Tensor) -> list[LayerKV]:
    """One row's keys and values at `columns` of each layer, [kv heads, len(columns), head dim]."""
    return [
        (keys[row].index_select(1, columns), values[row].index_select(1, columns)) for keys, values in layers
    ]


def _right_aligned(
    rows: Sequence[torch.Tensor | None], lengths: Sequence[int], width: int, like: torch.Tensor
) -> torch.Tensor:
    """[len(rows), kv heads, width, head dim]: the first lengths[b] positions of rows[b] ([kv heads, tokens,
    head dim]; None for a row without a head) in the last lengths[b] columns, zeros before (masked)."""
    out = like.new_zeros((len(rows), like.shape[0], width, like.shape[-1]))
    for b, (source, length) in enumerate(zip(rows, lengths, strict=True)):
        if source is not None and length:
            out[b, :, width - length :] = source[:, :length]
    return out


def _model_cache(model: PreTrainedModel) -> Cache:
    """An empty cache of the kind `generate` makes for `model` (what its layers keep)."""
    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers without per-layer caches: every layer keeps every position
        return DynamicCache()
