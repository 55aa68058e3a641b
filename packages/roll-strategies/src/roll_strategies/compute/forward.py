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
  mask). `probes.packing_supported` checks that a model really honours this (packed outputs equal
  per-sequence ones); where it does not, callers fall back to padded micro-batches (dynamic batching).
- tree (`share_prefix`): rows that share a prefix (a group's prompt, a multi-turn history) are merged into
  a trie (`prefix_tree`), each root's subtree one right-padded batch row with its own [G, 1, M, M]
  additive mask (each token attends to itself and its ancestors) and position ids = depth: every prefix
  token runs once, and autograd sums all its rows' gradients into it, so outputs and gradients equal the
  padded path's. A sliding-window layer sees only the ancestors inside its window (`attention_windows`):
  the masks are a dict keyed by layer type where layers differ (transformers passes a 4D mask unchanged
  to every layer). The tree runs only where it costs less than the padded or packed rows would
  (`layout_cost.prefix_tree_pays`, on the one trie it builds: its nodes save tokens, each row's dense [M, M] mask costs attention pairs); rows
  that share nothing, or too little, run padded or packed. `probes.prefix_sharing_supported` checks that a
  model honours the masks (its probe forces the tree, `pair_weight=0`).

A causal LM's outputs are flat in the vocabulary (`logprobs.run_lm` / `vocab_stats`): the LM head runs
on chunks of positions, recomputed in the backward. The exact KL to a frozen reference (`full` /
`full_forward`) is computed the same way where both models are: the reference runs on the same layout,
and each chunk's reference logits live only as long as the chunk's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from roll_algos import pack_sequences
from roll_algos.micro_batch import MicroBatch
from torch import nn

from roll_strategies.compute.attention_windows import EVERY_LAYER, attention_windows
from roll_strategies.compute.layout_cost import model_pair_weight, prefix_tree_pays
from roll_strategies.compute.logprobs import (
    Head,
    TokenStats,
    position_ids_from_mask,
    run_lm,
    vocab_stats,
)
from roll_strategies.compute.prefix_tree import TreeForward, row_trie, tree_forward, tree_masks
from roll_strategies.errors import StrategyError

__all__ = [
    "PACK_CAPACITY_KEY",
    "REFERENCE_KEY",
    "SHARE_PREFIX_KEY",
    "ReferenceKL",
    "TokenOutputs",
    "lm_outputs",
    "micro_batch_outputs",
    "reference_kl",
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


class _Run(NamedTuple):
    """One forward's inputs, and where in its hidden states [R, C] the needed positions are predicted."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | dict[str, torch.Tensor] | None
    rows: torch.Tensor
    cols: torch.Tensor
    tree: TreeForward | None = None
    """The prefix tree this run is (its masks for another model: `_tree_mask`), None for padded / packed."""


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


def _padded(ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> _Run:
    """The rows as they come, trimmed to their last real column."""
    width = int(mask.bool().any(dim=0).nonzero().max()) + 1 if bool(mask.any()) else 1
    ids, mask = ids[:, :width], mask[:, :width]
    return _Run(ids, position_ids_from_mask(mask), mask, rows, cols - 1)


def _packed(
    ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, capacity: int, pad_id: int
) -> _Run:
    """Each row's real tokens packed as one sequence into rows of `capacity` tokens."""
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
    return _Run(packed.input_ids.to(device), packed.position_ids.to(device), None, prow, pcol)


def _mask_dtype(model: nn.Module) -> torch.dtype:
    """The dtype the model computes in (its first floating parameter's), for an additive attention mask."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _tree_mask(tree: TreeForward, model: nn.Module | None) -> torch.Tensor | dict[str, torch.Tensor]:
    """The tree's masks for `model`: its layers' windows, in its dtype (full attention in float32 without one)."""
    if model is None:
        return tree_masks(tree, {EVERY_LAYER: None}, torch.float32)
    return tree_masks(tree, attention_windows(model), _mask_dtype(model))


def _tree(
    ids: torch.Tensor,
    mask: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    model: nn.Module | None,
    pack_capacity: int | None,
    pair_weight: float,
) -> _Run | None:
    """The rows' trie, a row per root's subtree (`prefix_tree`), where it costs less than the rows
    (`layout_cost.prefix_tree_pays`); None where it does not, or the rows share no prefix. The trie is built
    once for both: it takes about 1% of the tree's inputs (3,856 nodes: 1.5 ms against 137 ms with its masks)."""
    starts, lengths = _spans(mask)
    trie = row_trie(ids, starts, lengths)
    if not prefix_tree_pays(trie, lengths.tolist(), pack_capacity, pair_weight):
        return None
    tree = tree_forward(ids, starts, lengths, rows, cols, trie)
    if tree is None:
        return None
    return _Run(tree.input_ids, tree.position_ids, _tree_mask(tree, model), tree.rows, tree.cols, tree)


def _weight(model: nn.Module, share_prefix: bool, pair_weight: float | None) -> float:
    """One attention pair's cost in tokens: `pair_weight` where given, else `model`'s
    (`layout_cost.model_pair_weight`), read only for a tree."""
    if pair_weight is not None:
        return pair_weight
    return model_pair_weight(model) if share_prefix else 0.0


def _layout(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    pack_capacity: int | None,
    pad_id: int,
    share_prefix: bool = False,
    model: nn.Module | None = None,
    pair_weight: float = 0.0,
) -> tuple[_Run, torch.Tensor, torch.Tensor]:
    """The forward to run and the (rows, cols) of the needed positions in the batch: under `share_prefix` the
    tree where it pays (`prefix_tree_pays`, one attention pair weighing `pair_weight` tokens; 0: wherever rows share a
    token), its masks built for `model`'s attention windows and dtype."""
    rows, cols = _positions(attention_mask, needed)
    if share_prefix:
        tree = _tree(input_ids, attention_mask, rows, cols, model, pack_capacity, pair_weight)
        if tree is not None:
            return tree, rows, cols
    if pack_capacity is None:
        return _padded(input_ids, attention_mask, rows, cols), rows, cols
    return _packed(input_ids, attention_mask, rows, cols, pack_capacity, pad_id), rows, cols


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return values.new_zeros(shape).index_put((rows, cols), values)


def _features(model: nn.Module, run: _Run) -> tuple[torch.Tensor, Head, int]:
    """(features, head, vocabulary) of `model` at the run's positions, no grad (a frozen reference)."""
    mask = run.attention_mask if run.tree is None else _tree_mask(run.tree, model)  # its own windows, dtype
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
    weight = _weight(model, share_prefix, pair_weight)
    run, rows, cols = _layout(
        input_ids, attention_mask, needed, pack_capacity, pad_id, share_prefix, model, weight
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

    def scatter(values: torch.Tensor | None) -> torch.Tensor | None:
        return None if values is None else _scatter(values, rows, cols, shape)

    return TokenOutputs(
        scatter(stats.log_probs),  # type: ignore[arg-type]
        scatter(stats.entropy),
        scatter(stats.kl),
        scatter(stats.kl_forward),
        scatter(stats.ref_log_probs),
        scatter(stats.greedy),
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
    weight = _weight(model, share_prefix, pair_weight)
    run, rows, cols = _layout(
        input_ids, attention_mask, needed, pack_capacity, pad_id, share_prefix, model, weight
    )
    out = model(
        input_ids=run.input_ids,
        attention_mask=run.attention_mask,
        position_ids=run.position_ids,
        use_cache=False,
    ).logits
    return _scatter(out[run.rows, run.cols, 0].float(), rows, cols, input_ids.shape)


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
    `share_prefix` (the strategy's setting) for this micro-batch."""
    capacity = mb.get(PACK_CAPACITY_KEY)
    share = mb.get(SHARE_PREFIX_KEY)
    return lm_outputs(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        mb["response_mask"],
        with_entropy=with_entropy,
        reference=mb.get(REFERENCE_KEY),
        pack_capacity=None if capacity is None else int(capacity),
        pad_id=pad_id,
        share_prefix=share_prefix if share is None else bool(share),
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
    if micro_batch_size < 1:
        raise StrategyError(f"Expected micro_batch_size >= 1, got {micro_batch_size}.")
    ids, mask, needed = batch["input_ids"], batch["attention_mask"], batch["response_mask"].bool()
    out = ReferenceKL(*(torch.zeros(ids.shape, dtype=torch.float32) for _ in range(3)))
    with torch.no_grad():
        for start in range(0, ids.shape[0], micro_batch_size):
            sl = slice(start, start + micro_batch_size)
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
