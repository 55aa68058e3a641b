"""Per-token outputs of a model on rows of sequences, padded or packed, aligned with `input_ids`.

Every output at position t comes from the model's hidden state at t - 1: the log-prob of token t (and
the entropy / exact KL of the distribution that predicted it) for a causal LM, the value V(s_t) of the
state before token t for a value model. Outputs are computed only at the `needed` positions (the
response tokens) and scattered into a [B, T] tensor of zeros, so the padded and the packed path give
the same layout and the caller's loss never knows which ran.

The layout of each forward (padded, packed or a prefix tree) is `layout`'s.

A causal LM's outputs are flat in the vocabulary (`logprobs.run_lm` / `vocab_stats`): the LM head runs
on chunks of positions, recomputed in the backward. The exact KL to a frozen reference (`full` /
`full_forward`) is computed the same way where both models are: the reference runs on the same layout,
and each chunk's reference logits live only as long as the chunk's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from roll_algos.micro_batch import MicroBatch
from torch import nn

from roll_strategies.compute.layout import Run, layout, scatter, tree_mask
from roll_strategies.compute.logprobs import Head, TokenStats, run_lm, vocab_stats
from roll_strategies.errors import StrategyError

__all__ = [
    "PACK_CAPACITY_KEY",
    "REFERENCE_KEY",
    "SHARE_PREFIX_KEY",
    "ReferenceKL",
    "TokenOutputs",
    "lm_outputs",
    "micro_batch_outputs",
    "micro_batch_values",
    "reference_kl",
    "row_slices",
    "value_outputs",
]

# the `roll_algos.MicroBatch` keys that steer the forward (their meaning: MicroBatch's docstring)
PACK_CAPACITY_KEY = "pack_capacity"
SHARE_PREFIX_KEY = "share_prefix"
REFERENCE_KEY = "reference_model"


class TokenOutputs(NamedTuple):
    """Per-token LM outputs [B, T], zero outside the needed positions."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    full_kl: torch.Tensor | None
    full_kl_forward: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    greedy: torch.Tensor | None = None  # 1.0 where the token is the argmax of its distribution (with entropy)


class ReferenceKL(NamedTuple):
    """What the experience step needs of the exact KL, [B, T] float32 on CPU, zero off the response."""

    kl: torch.Tensor  # exact KL(pi || ref) per response token (`full`)
    kl_forward: torch.Tensor  # exact KL(ref || pi) (`full_forward`)
    ref_log_probs: torch.Tensor  # log ref of the sampled tokens


def _features(model: nn.Module, run: Run) -> tuple[torch.Tensor, Head, int]:
    """(features, head, vocabulary) of `model` at the run's positions, no grad (a frozen reference)."""
    mask = run.attention_mask if run.tree is None else tree_mask(run.tree, model)  # its own windows, dtype
    with torch.no_grad():
        return run_lm(
            model,
            run.input_ids,
            run.position_ids,
            mask,
            run.rows,
            run.cols,
            lambda f, h, v: (f, h, v),
        )


def lm_outputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    *,
    with_entropy: bool = False,
    reference: nn.Module | None = None,
    pack_capacity: int | None = None,
    pad_id: int = 0,
    share_prefix: bool = False,
    pair_weight: float | None = None,
) -> TokenOutputs:
    """log p(token t | tokens < t) at the needed positions of each row, padded or packed.

    Args:
        model: a causal LM (a Hugging Face model, or a DeepSpeed engine wrapping one).
        input_ids, attention_mask: [B, T]; needed: [B, T] bool (e.g. the response mask).
        with_entropy: also the entropy of each predicting distribution, and whether each token is its
            argmax (`greedy`).
        reference: a frozen causal LM of the same vocabulary: adds the exact per-token KL(pi || ref) over
            the vocabulary (`full_kl`), KL(ref || pi) (`full_kl_forward`) and the reference's log-probs
            (`ref_log_probs`), computed chunk by chunk of positions (no grad through the reference).
        pack_capacity: None for the padded forward; else pack the rows into rows of this many tokens.
        pad_id: id written on packed padding.
        share_prefix: run the rows as a prefix tree where it costs less than the padded or packed rows
            (module docstring); a tree wins over `pack_capacity`.
        pair_weight: one attention pair's cost in tokens for that choice; None: the model's
            (`layout_cost.model_pair_weight`); 0 runs the tree wherever rows share a token (the probe, tests).
    Returns:
        `TokenOutputs` of [B, T] float32 tensors (zero off `needed`), differentiable outside no_grad.
    """
    run, rows, cols = layout(
        input_ids, attention_mask, needed, pack_capacity, pad_id, share_prefix, model, pair_weight
    )
    targets = input_ids[rows, cols]
    ref: tuple[torch.Tensor, Head] | None = None
    if reference is not None:
        ref_features, ref_head, ref_vocab = _features(reference, run)
        ref = (ref_features, ref_head)

    def reduce(features: torch.Tensor, head: Head, vocab: int) -> TokenStats:
        if reference is not None and vocab != ref_vocab:
            raise StrategyError(
                f"Expected the reference model's vocabulary to be the trained model's ({vocab}), got "
                f"{ref_vocab}; load the reference from the same model family."
            )
        return vocab_stats(features, head, vocab, targets, with_entropy=with_entropy, reference=ref)

    stats = run_lm(model, run.input_ids, run.position_ids, run.attention_mask, run.rows, run.cols, reduce)
    shape = input_ids.shape

    def placed(values: torch.Tensor | None) -> torch.Tensor | None:
        return None if values is None else scatter(values, rows, cols, shape)

    return TokenOutputs(
        placed(stats.log_probs),  # type: ignore[arg-type]
        placed(stats.entropy),
        placed(stats.kl),
        placed(stats.kl_forward),
        placed(stats.ref_log_probs),
        placed(stats.greedy),
    )


def value_outputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    *,
    pack_capacity: int | None = None,
    pad_id: int = 0,
    share_prefix: bool = False,
    pair_weight: float | None = None,
) -> torch.Tensor:
    """Values V(state before token t) [B, T] float32 at the needed positions (zero elsewhere).

    `model` returns `.logits` [R, C, 1] (e.g. `AutoModelForTokenClassification` with one label);
    `share_prefix` runs the rows as a prefix tree where it pays (`pair_weight` as in `lm_outputs`).
    """
    run, rows, cols = layout(
        input_ids, attention_mask, needed, pack_capacity, pad_id, share_prefix, model, pair_weight
    )
    out = model(
        input_ids=run.input_ids,
        attention_mask=run.attention_mask,
        position_ids=run.position_ids,
        use_cache=False,
    ).logits
    return scatter(out[run.rows, run.cols, 0].float(), rows, cols, input_ids.shape)


def row_slices(rows: int, micro_batch_size: int) -> list[slice]:
    """The micro-batches of a batch of `rows` rows, `micro_batch_size` rows each (the last may have fewer)."""
    if micro_batch_size < 1:
        raise StrategyError(f"Expected micro_batch_size >= 1, got {micro_batch_size}.")
    return [slice(start, start + micro_batch_size) for start in range(0, rows, micro_batch_size)]


def _layout_keys(mb: MicroBatch, share_prefix: bool) -> tuple[int | None, bool]:
    """(pack capacity, share prefix) of a training micro-batch: its `PACK_CAPACITY_KEY`, and its
    `SHARE_PREFIX_KEY` over `share_prefix` (the strategy's setting)."""
    capacity, share = mb.get(PACK_CAPACITY_KEY), mb.get(SHARE_PREFIX_KEY)
    return None if capacity is None else int(capacity), share_prefix if share is None else bool(share)


def micro_batch_outputs(
    model: nn.Module,
    mb: MicroBatch,
    *,
    with_entropy: bool,
    pad_id: int = 0,
    share_prefix: bool = False,
) -> TokenOutputs:
    """`lm_outputs` of a training micro-batch: `needed` is its response mask; `PACK_CAPACITY_KEY` asks for
    the packed forward, `REFERENCE_KEY` (a frozen model) for the exact KL, and `SHARE_PREFIX_KEY` overrides
    `share_prefix` (the strategy's setting) for this micro-batch. What the loss reads from the micro-batch
    beside the log-probs and entropy is written into `mb`: `full_kl` / `full_kl_forward` (with a reference)
    and `greedy` (with entropy)."""
    capacity, share = _layout_keys(mb, share_prefix)
    out = lm_outputs(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        mb["response_mask"],
        with_entropy=with_entropy,
        reference=mb.get(REFERENCE_KEY),
        pack_capacity=capacity,
        pad_id=pad_id,
        share_prefix=share,
    )
    if out.full_kl is not None:
        mb["full_kl"], mb["full_kl_forward"] = out.full_kl, out.full_kl_forward
    if out.greedy is not None:  # the loss's actor/sampled_not_greedy
        mb["greedy"] = out.greedy
    return out


def micro_batch_values(
    model: nn.Module, mb: MicroBatch, *, pad_id: int = 0, share_prefix: bool = False
) -> torch.Tensor:
    """`value_outputs` of a training micro-batch, its keys read as `micro_batch_outputs` reads them."""
    capacity, share = _layout_keys(mb, share_prefix)
    return value_outputs(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        mb["response_mask"],
        pack_capacity=capacity,
        pad_id=pad_id,
        share_prefix=share,
    )


def reference_kl(
    model: nn.Module,
    reference: nn.Module,
    batch: Mapping[str, torch.Tensor],
    micro_batch_size: int,
    *,
    device: str | torch.device,
    share_prefix: bool = False,
    pair_weight: float | None = None,
) -> ReferenceKL:
    """The exact KL between `model` and the frozen `reference` at the response positions of `batch`, and
    the reference's log-probs of the response tokens, in micro-batches of rows, no grad, on CPU.

    Memory is O(chunk x vocabulary) (`logprobs.vocab_stats`): only [B, T] tensors come back;
    `share_prefix` runs each micro-batch as a prefix tree where it pays (`pair_weight` as in `lm_outputs`).
    """
    ids, mask, needed = batch["input_ids"], batch["attention_mask"], batch["response_mask"].bool()
    out = ReferenceKL(*(torch.zeros(ids.shape, dtype=torch.float32) for _ in range(3)))
    with torch.no_grad():
        for sl in row_slices(ids.shape[0], micro_batch_size):
            if not bool(needed[sl].any()):
                continue
            got = lm_outputs(
                model,
                ids[sl].to(device),
                mask[sl].to(device),
                needed[sl].to(device),
                reference=reference,
                share_prefix=share_prefix,
                pair_weight=pair_weight,
            )
            out.kl[sl] = got.full_kl.cpu()  # type: ignore[union-attr]
            out.kl_forward[sl] = got.full_kl_forward.cpu()  # type: ignore[union-attr]
            out.ref_log_probs[sl] = got.ref_log_probs.cpu()  # type: ignore[union-attr]
    return out
