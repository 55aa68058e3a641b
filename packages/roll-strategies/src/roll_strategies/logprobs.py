"""Per-token log-probs (and entropy) of given sequences under a causal LM, aligned with input_ids."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping

import torch
from roll_algos import entropy_from_logits, log_probs_from_logits
from torch import nn

from roll_strategies.errors import StrategyError

__all__ = ["batched_log_probs", "position_ids_from_mask", "token_log_probs"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] positions counting only attended tokens (left or right padding alike); pads get 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _first_needed_column(needed: torch.Tensor | None) -> int:
    """Smallest column any row needs a log-prob for (1 when all are needed; never 0: no context there)."""
    if needed is None or not bool(needed.any()):
        return 1
    return max(int(needed.any(dim=0).nonzero()[0]), 1)


@functools.cache
def _supports_logits_to_keep(model_class: type) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


def token_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    with_entropy: bool,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(input_ids[:, t] | input_ids[:, :t]) for every t, aligned with input_ids.

    Args:
        model: a causal LM returning `.logits` [B, T, V].
        input_ids: [B, T] long; attention_mask: [B, T] (1 = real token; left or right padding).
        with_entropy: also return the entropy of the distribution that predicted each position.
        needed: optional [B, T] bool, the positions the caller reads (e.g. the response mask). Columns
            before the first needed one are then left at 0 and their logits never computed: for RL rows
            (a long prompt, a short response) that skips most of the LM head's work.
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
    if needed is not None and needed.shape != input_ids.shape:
        raise StrategyError(
            f"Expected `needed` of the shape of input_ids {tuple(input_ids.shape)}, got "
            f"{tuple(needed.shape)}; pass the response mask of the same padded batch."
        )
    width = input_ids.shape[1]
    # A DeepSpeed engine forwards keyword arguments to the Hugging Face model it wraps (`.module`).
    inner = getattr(model, "module", model)
    first = _first_needed_column(needed) if _supports_logits_to_keep(type(inner)) else 1
    extra = {"logits_to_keep": width - first + 1} if first > 1 else {}
    logits = (
        model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
            **extra,
        )
        .logits[:, -(width - first + 1) : -1]
        .float()
    )
    # Position t counts when it and its predecessor are real tokens (a row's first real token has no context).
    mask = (attention_mask[:, first:].bool() & attention_mask[:, first - 1 : -1].bool()).to(logits.dtype)
    zeros = logits.new_zeros((input_ids.shape[0], first))
    log_probs = torch.cat([zeros, log_probs_from_logits(logits, input_ids[:, first:]) * mask], dim=1)
    entropy = torch.cat([zeros, entropy_from_logits(logits) * mask], dim=1) if with_entropy else None
    return log_probs, entropy


def batched_log_probs(
    model: nn.Module, batch: Mapping[str, torch.Tensor], micro_batch_size: int, *, device: str | torch.device
) -> torch.Tensor:
    """`token_log_probs` over `batch["input_ids"]` / `batch["attention_mask"]` in micro-batches, no grad.

    With `batch["response_mask"]` present, only the positions from each micro-batch's first response
    column on are computed (see `needed` of `token_log_probs`). Returns [B, T] float32 on CPU.
    """
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    needed = batch.get("response_mask")
    if micro_batch_size < 1:
        raise StrategyError(f"Expected micro_batch_size >= 1, got {micro_batch_size}.")
    out = torch.zeros(input_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, input_ids.shape[0], micro_batch_size):
            ids = input_ids[start : start + micro_batch_size].to(device)
            mask = attention_mask[start : start + micro_batch_size].to(device)
            part = None if needed is None else needed[start : start + micro_batch_size].to(device)
            lp, _ = token_log_probs(model, ids, mask, with_entropy=False, needed=part)
            out[start : start + micro_batch_size] = lp.float().cpu()
    return out
