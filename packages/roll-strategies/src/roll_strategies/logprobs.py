"""Per-token log-probs (and entropy) of given sequences under a causal LM, aligned with input_ids."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from roll_algos import entropy_from_logits, log_probs_from_logits
from torch import nn

from roll_strategies.errors import StrategyError

__all__ = ["batched_log_probs", "position_ids_from_mask", "token_log_probs"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] positions counting only attended tokens (left or right padding alike); pads get 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_log_probs(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(input_ids[:, t] | input_ids[:, :t]) for every t, aligned with input_ids.

    Args:
        model: a causal LM returning `.logits` [B, T, V].
        input_ids: [B, T] long; attention_mask: [B, T] (1 = real token; left or right padding).
        with_entropy: also return the entropy of the distribution that predicted each position.
    Returns:
        (log_probs [B, T] float32, entropy [B, T] float32 or None); 0 at padded positions and at each
        row's first real token (position 0 when right padded), which has no context to be predicted from.
        Gradients flow when called outside `torch.no_grad()`.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise StrategyError(
            f"Expected input_ids and attention_mask of the same shape [B, T], got {tuple(input_ids.shape)} and "
            f"{tuple(attention_mask.shape)}; build both from the same padded batch."
        )
    logits = (
        model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        )
        .logits[:, :-1]
        .float()
    )
    # Position t counts when it and its predecessor are real tokens (a row's first real token has no context).
    mask = (attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()).to(logits.dtype)
    zeros = logits.new_zeros((input_ids.shape[0], 1))
    log_probs = torch.cat([zeros, log_probs_from_logits(logits, input_ids[:, 1:]) * mask], dim=1)
    entropy = torch.cat([zeros, entropy_from_logits(logits) * mask], dim=1) if with_entropy else None
    return log_probs, entropy


def batched_log_probs(
    model: nn.Module, batch: Mapping[str, torch.Tensor], micro_batch_size: int, *, device: str | torch.device
) -> torch.Tensor:
    """`token_log_probs` over `batch["input_ids"]` / `batch["attention_mask"]` in micro-batches, no grad.

    Returns [B, T] float32 on CPU.
    """
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    if micro_batch_size < 1:
        raise StrategyError(f"Expected micro_batch_size >= 1, got {micro_batch_size}.")
    out = torch.zeros(input_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, input_ids.shape[0], micro_batch_size):
            ids = input_ids[start : start + micro_batch_size].to(device)
            mask = attention_mask[start : start + micro_batch_size].to(device)
            lp, _ = token_log_probs(model, ids, mask, with_entropy=False)
            out[start : start + micro_batch_size] = lp.float().cpu()
    return out
