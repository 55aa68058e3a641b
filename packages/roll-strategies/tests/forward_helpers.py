"""What the forward tests share: one tiny model shape, a batch's columns, a model that drops one input."""

from __future__ import annotations

from collections.abc import Mapping

import torch

SHAPE = {
    "vocab_size": 256,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "initializer_range": 0.1,  # wider than the default so attention patterns (and mask errors) matter
}
"""Config keyword arguments of a tiny random Qwen2 / Llama / Mistral / Gemma3."""


def columns(b: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, response_mask) of a batch: the first three arguments of `lm_outputs`,
    `value_outputs` and `layout`."""
    return b["input_ids"], b["attention_mask"], b["response_mask"]


class DropsInput(torch.nn.Module):
    """A causal LM that never passes `dropped` ("position_ids": packed sequences attend across each other;
    "attention_mask": a tree's suffixes see each other), for the probes that must refuse it."""

    def __init__(self, inner: torch.nn.Module, dropped: str) -> None:
        super().__init__()
        self.inner, self.config, self.dropped = inner, inner.config, dropped

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        kept = {"attention_mask": attention_mask, "position_ids": position_ids}
        del kept[self.dropped]
        return self.inner(input_ids=input_ids, use_cache=False, **kept)
