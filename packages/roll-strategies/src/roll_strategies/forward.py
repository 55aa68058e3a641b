"""Per-token outputs of a model on rows of sequences, padded or packed, aligned with `input_ids`.

Every output at position t comes from the model's hidden state at t - 1: the log-prob of token t (and
the entropy / exact KL of the distribution that predicted it) for a causal LM, the value V(s_t) of the
state before token t for a value model. Outputs are computed only at the `needed` positions (the
response tokens) and scattered into a [B, T] tensor of zeros, so the padded and the packed path give
the same layout and the caller's loss never knows which ran.

- padded: the rows as they come (right or left padding), trimmed to their last real column;
- packed: each row's real tokens become one sequence, `roll_algos.pack_sequences` places them into rows
  of `capacity` tokens with position ids restarting per sequence, and the model runs with no attention
  mask: transformers then derives a block-diagonal causal mask from where the positions restart, so
  attention cannot cross sequences (flash-attention varlen kernels, or sdpa / eager with the derived
  mask). `packing_supported` checks that a model really honours this (packed outputs equal per-sequence
  ones); where it does not, callers fall back to padded micro-batches (dynamic batching).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from roll_algos import entropy_from_logits, pack_sequences
from torch import nn

from roll_strategies.errors import StrategyError
from roll_strategies.logprobs import _supports_logits_to_keep, position_ids_from_mask

__all__ = [
    "PACK_CAPACITY_KEY",
    "REF_FULL_KEY",
    "TokenOutputs",
    "full_log_probs",
    "lm_outputs",
    "micro_batch_outputs",
    "packing_supported",
    "value_outputs",
]

PACK_CAPACITY_KEY = "pack_capacity"
"""Micro-batch key (int or 0-dim tensor): run this micro-batch packed into rows of that many tokens."""

REF_FULL_KEY = "ref_full_log_probs"
"""Micro-batch key: [N, V] reference log-softmax at the response positions (row-major order of the
response mask); when present the strategy adds `full_kl` [B, T], the exact KL(pi || ref), with grad."""

# (input_ids [R, C], position_ids [R, C], attention_mask [R, C] | None, keep) -> outputs [R, K, D]
HeadFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None, int | torch.Tensor | None], torch.Tensor]


class TokenOutputs(NamedTuple):
    """Per-token LM outputs [B, T], zero outside the needed positions."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    full_kl: torch.Tensor | None
    full_kl_forward: torch.Tensor | None = None


def _positions(attention_mask: torch.Tensor, needed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of the needed positions, row-major; each must follow a real token."""
    if needed.shape != attention_mask.shape:
        raise StrategyError(
            f"Expected `needed` of shape {tuple(attention_mask.shape)} (the batch's), got {tuple(needed.shape)}."
        )
    rows, cols = needed.bool().nonzero(as_tuple=True)
    real = attention_mask.bool()
    if bool((cols == 0).any()) or not bool(
        real[rows, (cols - 1).clamp(min=0)].all() & real[rows, cols].all()
    ):
        raise StrategyError(
            "Expected every needed position (response token) to be a real token that follows a real token, got "
            "one at column 0 or next to padding; build the mask from the same padded rows as input_ids."
        )
    return rows, cols


def _spans(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(start, length) of each row's real tokens, which must be contiguous (left or right padding)."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    starts = real.long().argmax(dim=1)
    cols = torch.arange(real.shape[1], device=real.device)
    contiguous = (cols >= starts[:, None]) & (cols < (starts + lengths)[:, None])
    if not torch.equal(contiguous, real):
        raise StrategyError(
            "Expected each row's real tokens to be contiguous (left or right padding only) for a packed forward, "
            "got a gap inside a row; pad rows at one end."
        )
    return starts, lengths


def _padded(
    head: HeadFn, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, keep_ok: bool
) -> torch.Tensor:
    """Head outputs [N, D] at (rows, cols - 1) of one padded forward."""
    width = int(mask.bool().any(dim=0).nonzero().max()) + 1 if bool(mask.any()) else 1
    ids, mask = ids[:, :width], mask[:, :width]
    first = int(cols.min()) - 1 if cols.numel() else 0
    keep = width - first if keep_ok else None
    out = head(ids, position_ids_from_mask(mask), mask, keep)
    offset = width - out.shape[1]  # columns dropped at the front by `keep`
    return out[rows, cols - 1 - offset]


def _packed(
    head: HeadFn,
    ids: torch.Tensor,
    mask: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    keep_ok: bool,
    capacity: int,
    pad_id: int,
) -> torch.Tensor:
    """Head outputs [N, D] at (rows, cols - 1), each row's real tokens packed as one sequence."""
    starts, lengths = _spans(mask)
    present = (lengths > 0).nonzero(as_tuple=True)[0]
    seqs = [ids[int(b), int(starts[b]) : int(starts[b] + lengths[b])] for b in present]
    longest = int(lengths.max()) if lengths.numel() else 1
    packed = pack_sequences(seqs, max(int(capacity), longest), pad_id=pad_id)
    device = ids.device
    which = torch.full((ids.shape[0],), -1, dtype=torch.long, device=device)
    which[present] = torch.arange(len(seqs), device=device)
    seq = which[rows]
    prow = packed.seq_row.to(device)[seq]
    pcol = packed.seq_offset.to(device)[seq] + (cols - 1 - starts[rows])
    keep: torch.Tensor | None = None
    if keep_ok:
        keep = torch.unique(pcol)  # sorted columns any row needs
        pcol = torch.searchsorted(keep, pcol)
    out = head(packed.input_ids.to(device), packed.position_ids.to(device), None, keep)
    return out[prow, pcol]


def _gather(
    head: HeadFn,
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    pack_capacity: int | None,
    pad_id: int,
    lm: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, cols = _positions(attention_mask, needed)
    keep_ok = lm and _supports_logits_to_keep(type(model))
    if pack_capacity is None:
        out = _padded(head, input_ids, attention_mask, rows, cols, keep_ok)
    else:
        out = _packed(head, input_ids, attention_mask, rows, cols, keep_ok, pack_capacity, pad_id)
    return out, rows, cols


def _lm_head(model: nn.Module) -> HeadFn:
    def head(ids, pos, mask, keep):
        extra = {} if keep is None else {"logits_to_keep": keep}
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **extra).logits

    return head


def _value_head(model: nn.Module) -> HeadFn:
    def head(ids, pos, mask, keep):
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits

    return head


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return values.new_zeros(shape).index_put((rows, cols), values)


def lm_outputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    *,
    with_entropy: bool = False,
    ref_full_log_probs: torch.Tensor | None = None,
    pack_capacity: int | None = None,
    pad_id: int = 0,
) -> TokenOutputs:
    """log p(token t | tokens < t) at the needed positions of each row, padded or packed.

    Args:
        model: a causal LM returning `.logits`.
        input_ids, attention_mask: [B, T]; needed: [B, T] bool (e.g. the response mask).
        with_entropy: also the entropy of each predicting distribution.
        ref_full_log_probs: [N, V] reference log-softmax at the N needed positions (row-major): adds the
            exact per-token KL(pi || ref) over the vocabulary (`full_kl`) and KL(ref || pi) (`full_kl_forward`).
        pack_capacity: None for the padded forward; else pack the rows into rows of this many tokens.
        pad_id: id written on packed padding.
    Returns:
        `TokenOutputs` of [B, T] float32 tensors (zero off `needed`), differentiable outside no_grad.
    """
    logits, rows, cols = _gather(
        _lm_head(model), model, input_ids, attention_mask, needed, pack_capacity, pad_id, lm=True
    )
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    shape = input_ids.shape
    log_probs = _scatter(logp.gather(-1, input_ids[rows, cols].unsqueeze(-1)).squeeze(-1), rows, cols, shape)
    entropy = _scatter(entropy_from_logits(logits), rows, cols, shape) if with_entropy else None
    full_kl = None
    if ref_full_log_probs is not None:
        ref = ref_full_log_probs.to(logp.device, logp.dtype)
        if ref.shape != logp.shape:
            raise StrategyError(
                f"Expected {REF_FULL_KEY} of shape {tuple(logp.shape)} (needed positions x vocabulary), got "
                f"{tuple(ref.shape)}; compute it with `full_log_probs` on the same rows."
            )
        full_kl = _scatter((logp.exp() * (logp - ref)).sum(-1), rows, cols, shape)
        full_kl_forward = _scatter((ref.exp() * (ref - logp)).sum(-1), rows, cols, shape)
        return TokenOutputs(log_probs, entropy, full_kl, full_kl_forward)
    return TokenOutputs(log_probs, entropy, full_kl)


def value_outputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    *,
    pack_capacity: int | None = None,
    pad_id: int = 0,
) -> torch.Tensor:
    """Values V(state before token t) [B, T] float32 at the needed positions (zero elsewhere).

    `model` returns `.logits` [R, C, 1] (e.g. `AutoModelForTokenClassification` with one label).
    """
    out, rows, cols = _gather(
        _value_head(model), model, input_ids, attention_mask, needed, pack_capacity, pad_id, lm=False
    )
    return _scatter(out[..., 0].float(), rows, cols, input_ids.shape)


def micro_batch_outputs(
    model: nn.Module, mb: Mapping[str, torch.Tensor], *, with_entropy: bool, pad_id: int = 0
) -> TokenOutputs:
    """`lm_outputs` of a training micro-batch: `needed` is its response mask; `PACK_CAPACITY_KEY` asks for
    the packed forward and `REF_FULL_KEY` for the exact KL."""
    capacity = mb.get(PACK_CAPACITY_KEY)
    return lm_outputs(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        mb["response_mask"],
        with_entropy=with_entropy,
        ref_full_log_probs=mb.get(REF_FULL_KEY),
        pack_capacity=None if capacity is None else int(capacity),
        pad_id=pad_id,
    )


def full_log_probs(
    model: nn.Module, batch: Mapping[str, torch.Tensor], micro_batch_size: int, *, device: str | torch.device
) -> torch.Tensor:
    """[N, V] float32 log-softmax at the N response positions of `batch` (row-major), no grad, on CPU.

    Memory is N x V floats: meant for small vocabularies or batches (the exact `full` KL estimator).
    """
    ids, mask, needed = batch["input_ids"], batch["attention_mask"], batch["response_mask"].bool()
    parts = []
    with torch.no_grad():
        for start in range(0, ids.shape[0], micro_batch_size):
            sl = slice(start, start + micro_batch_size)
            if not bool(needed[sl].any()):
                continue
            logits, _, _ = _gather(
                _lm_head(model), model, ids[sl].to(device), mask[sl].to(device), needed[sl].to(device),
                None, 0, lm=True,
            )  # fmt: skip
            parts.append(torch.log_softmax(logits.float(), dim=-1).cpu())
    if not parts:
        vocab = int(model.get_output_embeddings().weight.shape[0])
        return torch.zeros((0, vocab))
    return torch.cat(parts)


_PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}


def packing_supported(model: nn.Module, value_model: bool = False) -> bool:
    """Whether a packed forward of `model` equals per-sequence forwards (attention stays in each sequence).

    Probes once per model object with two short sequences; the answer is cached on the model.
    """
    cached = getattr(model, "_roll_packing_supported", None)
    if cached is not None:
        return bool(cached)
    param = next(model.parameters())
    vocab = int(getattr(model.config, "vocab_size", 64) or 64)
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(1, max(2, min(vocab, 200)), (n,), generator=gen) for n in (5, 7)]
    ids = torch.zeros((2, 7), dtype=torch.long)
    mask = torch.zeros((2, 7), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], mask[r, : len(s)] = s, 1
    needed = mask.bool().clone()
    needed[:, 0] = False
    ids, mask, needed = ids.to(param.device), mask.to(param.device), needed.to(param.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if value_model:
                a = value_outputs(model, ids, mask, needed)
                b = value_outputs(model, ids, mask, needed, pack_capacity=12)
            else:
                a = lm_outputs(model, ids, mask, needed).log_probs
                b = lm_outputs(model, ids, mask, needed, pack_capacity=12).log_probs
        ok = bool(torch.allclose(a, b, rtol=0, atol=_PROBE_TOLERANCE.get(param.dtype, 5e-2)))
    except Exception:  # a model that rejects position-id packing cannot pack
        ok = False
    finally:
        model.train(was_training)
    model._roll_packing_supported = ok
    return ok
