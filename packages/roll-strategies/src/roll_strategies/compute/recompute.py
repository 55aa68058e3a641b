"""The no-grad log-prob recompute of a batch, micro-batch by micro-batch, dense or as prefix trees: what
`compute_log_probs` of the train and infer strategies runs (old log-probs, reference log-probs)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from roll_strategies.compute.forward import lm_outputs, row_slices
from roll_strategies.compute.logprobs import _first_needed_column, token_log_probs

__all__ = ["batched_log_probs", "tree_log_probs"]


def tree_log_probs(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, response: torch.Tensor | None
) -> torch.Tensor:
    """One micro-batch's log-probs as `token_log_probs` gives them (a real token after a real one, from the
    first response column on), computed as a prefix tree; [B, T], zero elsewhere. `batched_log_probs` calls it
    under `share_prefix`."""
    real = mask.bool()
    first = _first_needed_column(response)
    needed = torch.zeros_like(real)
    needed[:, first:] = real[:, first:] & real[:, first - 1 : -1]
    return lm_outputs(model, ids, mask, needed, share_prefix=True).log_probs


def batched_log_probs(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    micro_batch_size: int,
    *,
    device: str | torch.device,
    share_prefix: bool = False,
) -> torch.Tensor:
    """`token_log_probs` over `batch["input_ids"]` / `batch["attention_mask"]` in micro-batches, no grad.

    With `batch["response_mask"]` present, only the positions from each micro-batch's first response
    column on are computed (see `needed` of `token_log_probs`). `share_prefix` runs each micro-batch as a
    prefix tree (`tree_log_probs`): the same positions and values, one forward per micro-batch either way
    (ZeRO-3 ranks stay in step). Returns [B, T] float32 on CPU.
    """
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    needed = batch.get("response_mask")
    out = torch.zeros(input_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for sl in row_slices(input_ids.shape[0], micro_batch_size):
            ids, mask = input_ids[sl].to(device), attention_mask[sl].to(device)
            part = None if needed is None else needed[sl].to(device)
            if share_prefix:
                lp = tree_log_probs(model, ids, mask, part)
            else:
                lp, _ = token_log_probs(model, ids, mask, with_entropy=False, needed=part)
            out[sl] = lp.float().cpu()
    return out
