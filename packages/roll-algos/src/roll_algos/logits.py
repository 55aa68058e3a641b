"""Per-token quantities from logits: entropy and log-probs of given labels (numerically stable)."""

from __future__ import annotations

import torch

from roll_algos.errors import check_shape

__all__ = ["entropy_from_logits", "log_probs_from_logits"]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: H = logsumexp(z) - sum softmax(z) * z.

    Stable for large or -inf logits (masked vocabulary entries contribute 0).
    Args:
        logits: [..., V] (typically [B, T, V]); computed in float32 at least.
    Returns:
        [...] (typically [B, T]).
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    z_finite = torch.where(torch.isfinite(z), z, torch.zeros_like(z))  # p = 0 where z = -inf
    return lse - (p * z_finite).sum(-1)


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] per position without materialising the full log-softmax.

    Args:
        logits: [B, T, V]; labels: [B, T] long (already shifted so labels[:, t] is predicted by logits[:, t]).
    Returns:
        [B, T] float32 (or logits' dtype when float64).
    """
    check_shape("logits", logits, [None, None, None])
    check_shape("labels", labels, list(logits.shape[:2]), hint="One label per logits position.")
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    picked = z.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(z, dim=-1)
