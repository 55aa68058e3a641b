"""Per-token log-probs (entropy, exact KL) of given sequences under a causal LM, flat in the vocabulary.

No [tokens, vocabulary] tensor is ever built: the model runs with no logits (`logits_to_keep` of no
column), the decoder's last hidden states are read at the positions that are needed, and the LM head runs
on chunks of `LOGITS_CHUNK_ELEMENTS // vocabulary` positions at a time (head -> log-softmax -> gather /
entropy / KL, then dropped). With grad, each chunk is recomputed in the backward (`torch.utils.checkpoint`),
so the backward holds one chunk's logits at a time too. Peak memory is O(chunk x vocabulary) on top of the
model's own O(tokens x hidden) activations, whatever the vocabulary.

A model whose logits are not `lm_head(last hidden state)` (e.g. logit soft-capping) is detected by a probe
on the first call (`_readout`) and runs on its own logits instead: still chunked in the log-softmax, but
its forward then holds [tokens, vocabulary] logits.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch
from roll_algos import entropy_from_logits
from torch import nn
from torch.utils.checkpoint import checkpoint

from roll_strategies.errors import StrategyError

__all__ = [
    "LOGITS_CHUNK_ELEMENTS",
    "TokenStats",
    "position_ids_from_mask",
    "run_lm",
    "token_log_probs",
    "vocab_stats",
]

LOGITS_CHUNK_ELEMENTS = 1 << 24
"""Positions x vocabulary per LM-head chunk: 64 MiB per [chunk, vocabulary] float32 temporary."""

Head = Callable[[torch.Tensor], torch.Tensor]
"""features [n, D] -> logits [n, V]: the LM head, or the identity when the features are logits already."""

T = TypeVar("T")

_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.Lock] = weakref.WeakKeyDictionary()
"""One lock per model for `run_lm` (kept off the model, which must stay deep-copyable)."""
_LOCKS_LOCK = threading.Lock()


class TokenStats(NamedTuple):
    """Per-position outputs [N] of `vocab_stats` (None when not asked for)."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    kl: torch.Tensor | None  # exact KL(pi || ref) over the vocabulary
    kl_forward: torch.Tensor | None  # exact KL(ref || pi)
    ref_log_probs: torch.Tensor | None  # log ref of the target token
    greedy: torch.Tensor | None = None  # 1.0 where the target is the distribution's argmax (with the entropy)


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


def _unwrap(model: nn.Module) -> nn.Module:
    """The Hugging Face model itself (a DeepSpeed engine wraps it as `.module`)."""
    return getattr(model, "module", model)


def _last_hidden(output: object) -> torch.Tensor:
    hidden = getattr(output, "last_hidden_state", None)
    return hidden if hidden is not None else output[0]  # type: ignore[index]


def _readout(inner: nn.Module) -> nn.Module | None:
    """The LM head when the model's logits are `head(decoder's last hidden state)`, else None.

    Probed once per model object on a short sequence (logits and hidden states of the same forward, so
    dropout cannot differ) and cached on it.
    """
    cached = getattr(inner, "_roll_readout_ok", None)
    if cached is not None:
        return inner.get_output_embeddings() if cached else None
    ok = False
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else None
    if head is not None and decoder is not None and decoder is not inner:
        captured: dict[str, torch.Tensor] = {}
        handle = decoder.register_forward_hook(lambda m, a, out: captured.__setitem__("h", _last_hidden(out)))
        device = next(inner.parameters()).device
        ids = torch.arange(1, 6, device=device).unsqueeze(0)
        try:
            with torch.no_grad():
                logits = inner(input_ids=ids, use_cache=False).logits
                ok = "h" in captured and bool(
                    torch.allclose(head(captured["h"]).float(), logits.float(), rtol=1e-3, atol=1e-3)
                )
        finally:
            handle.remove()
    inner._roll_readout_ok = ok
    return head if ok else None


def _vocab_size(head: nn.Module, inner: nn.Module) -> int:
    out = getattr(head, "out_features", None)  # nn.Linear keeps it when ZeRO-3 partitions the weight
    return int(out) if out else int(inner.config.get_text_config().vocab_size)


def run_lm(
    model: nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    cols: torch.Tensor,
    reduce: Callable[[torch.Tensor, Head, int], T],
) -> T:
    """One forward of the causal LM `model`; returns `reduce(features [N, D], head, vocabulary)` at the
    hidden states (rows, cols) (each predicts the token after it).

    `reduce` runs inside the model's forward call (a forward hook replaces its output), so a DeepSpeed
    engine's backward hooks see what it returns. Features are the decoder's last hidden states and `head`
    the LM head; on a model that fails the `_readout` probe, the logits and the identity. Calls on one
    model are serialised: the hooks are on the model, so two threads' forwards must not meet.
    """
    inner = _unwrap(model)
    with _LOCKS_LOCK:
        lock = _LOCKS.setdefault(inner, threading.Lock())
    with lock:
        head = _readout(inner)
        captured: dict[str, torch.Tensor] = {}
        extra: dict[str, object] = {}
        handles = []
        if head is not None:
            decoder = inner.get_decoder()
            handles.append(
                decoder.register_forward_hook(lambda m, a, out: captured.__setitem__("h", _last_hidden(out)))
            )
            if _supports_logits_to_keep(type(inner)):  # no logits at all: the head runs in chunks below
                extra["logits_to_keep"] = torch.empty(0, dtype=torch.long, device=input_ids.device)

        def on_output(module: nn.Module, args: object, output: object) -> T:
            if head is not None:
                return reduce(captured.pop("h")[rows, cols], head, _vocab_size(head, inner))
            logits = output.logits[rows, cols]  # type: ignore[attr-defined]
            return reduce(logits, _identity, int(logits.shape[-1]))

        handles.append(inner.register_forward_hook(on_output))
        try:
            return model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=False,
                **extra,
            )
        finally:
            for handle in handles:
                handle.remove()


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _chunk_stats(
    features: torch.Tensor,
    targets: torch.Tensor,
    ref_features: torch.Tensor | None,
    head: Head,
    ref_head: Head | None,
    with_entropy: bool,
) -> torch.Tensor:
    """[n, K] stats of one chunk of positions (columns as in `vocab_stats`)."""
    logits = head(features).float()
    logp = torch.log_softmax(logits, dim=-1)
    out = [logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)]
    if with_entropy:  # and whether the target is the argmax: the logits are at hand for both
        out.append(entropy_from_logits(logits))
        out.append((logits.argmax(-1) == targets).float())
    if ref_features is not None and ref_head is not None:
        with torch.no_grad():  # the reference is frozen: its logits are constants of the loss
            logq = torch.log_softmax(ref_head(ref_features).float(), dim=-1)
        out.append((logp.exp() * (logp - logq)).sum(-1))
        out.append((logq.exp() * (logq - logp)).sum(-1))
        out.append(logq.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out, dim=-1)


def vocab_stats(
    features: torch.Tensor,
    head: Head,
    vocab: int,
    targets: torch.Tensor,
    *,
    with_entropy: bool,
    reference: tuple[torch.Tensor, Head] | None = None,
    chunk_elements: int | None = None,
) -> TokenStats:
    """Log-prob of `targets` [N] under softmax(head(features)) [N, vocab], chunk by chunk of positions.

    Args:
        features: [N, D] (hidden states, or logits with the identity head); targets: [N] token ids.
        with_entropy: also the entropy of each distribution, and whether the target is its argmax (`greedy`).
        reference: (features [N, D'], head) of a frozen reference at the same positions: adds the exact
            KL(pi || ref), KL(ref || pi) and the reference's log-prob of the target (no grad through it).
        chunk_elements: positions x vocabulary per chunk (default: `LOGITS_CHUNK_ELEMENTS`, read per call).
    Returns:
        `TokenStats` of float32 [N] tensors; differentiable in `features` (and the head) outside no_grad,
        each chunk recomputed in the backward instead of keeping its logits.
    """
    if targets.shape != features.shape[:1]:
        raise StrategyError(
            f"Expected one target per feature row, got targets {tuple(targets.shape)} for features "
            f"{tuple(features.shape)}; index both at the same positions."
        )
    ref_features, ref_head = reference if reference is not None else (None, None)
    if ref_features is not None and ref_features.shape[0] != features.shape[0]:
        raise StrategyError(
            f"Expected the reference's features at the same {features.shape[0]} positions, got "
            f"{ref_features.shape[0]}; run both models on the same rows."
        )
    step = max(1, (chunk_elements or LOGITS_CHUNK_ELEMENTS) // max(vocab, 1))
    recompute = torch.is_grad_enabled() and features.requires_grad
    fn = functools.partial(_chunk_stats, head=head, ref_head=ref_head, with_entropy=with_entropy)
    parts = []
    # no positions: one empty chunk, so the (empty) outputs still hang off the graph for a backward
    for start in range(0, features.shape[0], step) or [0]:
        sl = slice(start, start + step)
        args = (features[sl], targets[sl], None if ref_features is None else ref_features[sl])
        parts.append(checkpoint(fn, *args, use_reentrant=False) if recompute else fn(*args))
    stats = torch.cat(parts)
    cols = iter(stats.unbind(-1))
    log_probs = next(cols)
    entropy, greedy = (next(cols), next(cols)) if with_entropy else (None, None)
    if reference is None:
        return TokenStats(log_probs, entropy, None, None, None, greedy)
    return TokenStats(log_probs, entropy, next(cols), next(cols), next(cols), greedy)


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
        model: a causal LM (a Hugging Face model, or a DeepSpeed engine wrapping one).
        input_ids: [B, T] long; attention_mask: [B, T] (1 = real token; left or right padding).
        with_entropy: also return the entropy of the distribution that predicted each position.
        needed: optional [B, T] bool, the positions the caller reads (e.g. the response mask). Columns
            before the first needed one are then left at 0 and never computed: for RL rows (a long
            prompt, a short response) that skips most of the LM head's work.
    Returns:
        (log_probs [B, T] float32, entropy [B, T] float32 or None); 0 at padded positions and at each
        row's first real token (position 0 when right padded), which has no context to be predicted from.
        Gradients flow when called outside `torch.no_grad()`. Memory is flat in the vocabulary (module
        docstring).
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
    first = _first_needed_column(needed)
    real = attention_mask.bool()
    # Position t counts when it and its predecessor are real tokens (a row's first real token has no context).
    valid = torch.zeros_like(real)
    valid[:, first:] = real[:, first:] & real[:, first - 1 : -1]
    rows, cols = valid.nonzero(as_tuple=True)
    targets = input_ids[rows, cols]

    def reduce(features: torch.Tensor, head: Head, vocab: int) -> TokenStats:
        return vocab_stats(features, head, vocab, targets, with_entropy=with_entropy)

    stats = run_lm(
        model, input_ids, position_ids_from_mask(attention_mask), attention_mask, rows, cols - 1, reduce
    )
    zeros = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    log_probs = zeros.index_put((rows, cols), stats.log_probs)
    entropy = zeros.index_put((rows, cols), stats.entropy) if stats.entropy is not None else None
    return log_probs, entropy
