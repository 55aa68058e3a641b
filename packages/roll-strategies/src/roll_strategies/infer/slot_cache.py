"""`SlotKVCache`: a static key/value cache of fixed slots for hf_infer's slot decoder (`slot_decode`).

Each layer keeps one buffer [slots, kv heads, length + SCRATCH_COLUMNS, head dim]. A slot holds one sequence,
its token i at column i, so a slot's keys and values are those of its sequence alone. Column `length` is
scratch: padding queries write there and attend only there, so their garbage never reaches a real query and
stays finite (a NaN value times a zero weight would still be NaN); the columns after it are never seen and only
round the width to a multiple of 8 (the alignment CUDA's memory-efficient attention wants of a mask).

A forward writes its queries' keys and values at the columns `cols` ([rows, width], one per query) of the
slots `rows` (None: every slot, the decode step), so rows at different positions decode in one fixed-shape
step: the shapes of a decode step depend on the slot count and cache length only, which CUDA graphs and
torch.compile need. Attention sees the columns `visibility_mask` allows (an additive 4D mask the models take
as given). `DecodeGraph` captures one cache's decode step as a CUDA graph and replays it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache, PreTrainedModel

from roll_strategies.compute.attention_windows import _text_config
from roll_strategies.infer.turn_cache import LayerKV

__all__ = ["SCRATCH_COLUMNS", "DecodeGraph", "SlotKVCache", "visibility_mask"]

SCRATCH_COLUMNS = 8
"""Columns after a cache's `length`: the scratch column, then padding to keep widths multiples of 8."""


class SlotKVCache(Cache):
    """Per-layer static buffers of `slots` sequences of up to `length` tokens, plus a scratch column."""

    def __init__(self, model: PreTrainedModel, slots: int, length: int) -> None:
        super().__init__(layers=[])
        config = _text_config(model)
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        shape = (slots, kv_heads, length + SCRATCH_COLUMNS, head_dim)
        like = next(model.parameters())
        self.length = length
        self.width = length + SCRATCH_COLUMNS
        self.scratch = length
        """The column padding queries and idle slots write to (never visible to a real query)."""
        self.keys = [like.new_zeros(shape) for _ in range(config.num_hidden_layers)]
        self.values = [like.new_zeros(shape) for _ in range(config.num_hidden_layers)]
        self.rows: torch.Tensor | None = None
        self.cols = torch.zeros((slots, 1), dtype=torch.long, device=like.device)
        self._all = torch.arange(slots, device=like.device).unsqueeze(1)

    def target(self, rows: torch.Tensor | None, cols: torch.Tensor) -> None:
        """Where the next forward writes: its row b's query j goes to column cols[b, j] of slot rows[b]."""
        self.rows, self.cols = rows, cols

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the forward's [rows, kv heads, width, head dim] keys and values at their columns; return the
        whole buffers of those rows (the attention's keys and values)."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        rows = self._all if self.rows is None else self.rows.unsqueeze(1)
        # advanced indices around a slice put their dims first: [rows, width, kv heads, head dim]
        keys[rows, :, self.cols] = key_states.transpose(1, 2).to(keys.dtype)
        values[rows, :, self.cols] = value_states.transpose(1, 2).to(values.dtype)
        if self.rows is None:
            return keys, values
        return keys[self.rows], values[self.rows]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The buffers' length (positions are always passed explicitly)."""
        return self.length

    def copy_in(self, slot: int, layers: Sequence[LayerKV], length: int) -> None:
        """Columns [0, length) of `slot` from a kept sequence's layers ([kv heads, tokens, head dim] each)."""
        for index, (keys, values) in enumerate(layers):
            self.keys[index][slot, :, :length] = keys[:, :length]
            self.values[index][slot, :, :length] = values[:, :length]

    def copy_slot(self, source: int, targets: Sequence[int], length: int) -> None:
        """Columns [0, length) of slot `source` into each slot of `targets` (a repeated prompt's samples)."""
        if not targets:
            return
        index = torch.tensor(list(targets), device=self.cols.device)
        for buffers in (self.keys, self.values):
            for buffer in buffers:
                buffer[index, :, :length] = buffer[source, :, :length]

    def slot_layers(self, slot: int, length: int) -> list[LayerKV]:
        """Copies of columns [0, length) of `slot`, [kv heads, length, head dim] per layer (a turn to keep)."""
        return [
            (keys[slot, :, :length].clone(), values[slot, :, :length].clone())
            for keys, values in zip(self.keys, self.values, strict=True)
        ]


def visibility_mask(limits: torch.Tensor, width: int, scratch: int, dtype: torch.dtype) -> torch.Tensor:
    """[rows, 1, queries, width] additive mask: query (b, j) sees columns 0..limits[b, j] (all below
    `scratch`); a query with limit -1 (padding, an idle slot) sees only the scratch column."""
    columns = torch.arange(width, device=limits.device)
    limit = limits.unsqueeze(-1)
    visible = (columns <= limit) & (columns < scratch)
    visible |= (limit < 0) & (columns == scratch)
    mask = torch.zeros(visible.shape, dtype=dtype, device=limits.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min).unsqueeze(1)


class DecodeGraph:
    """The decode step of one cache, captured once as a CUDA graph and replayed: one launch per step instead of
    one per kernel (the HF `generate` loop on a GPU is bound by those launches). Capture writes only the
    scratch column, so it leaves every slot's keys and values as they were."""

    def __init__(self, forward: Any, cache: SlotKVCache) -> None:
        slots = cache.cols.shape[0]
        self.cache, self.shape = cache, (slots, cache.length)
        device = cache.cols.device
        self.ids = torch.zeros((slots, 1), dtype=torch.long, device=device)
        self.cols = torch.full((slots, 1), cache.scratch, dtype=torch.long, device=device)
        self.limits = torch.full((slots, 1), -1, dtype=torch.long, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the capture stream, as torch's CUDA-graph docs require
            for _ in range(2):
                forward(cache, None, self.ids, self.cols, self.limits)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = forward(cache, None, self.ids, self.cols, self.limits)

    def run(self, ids: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
        """The step's [slots, vocab] logits for these inputs (the graph's output buffer: copy it out)."""
        self.ids.copy_(ids)
        self.cols.copy_(cols)
        self.limits.copy_(limits)
        self.graph.replay()
        return self.out
