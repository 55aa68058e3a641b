"""Where a micro-batch's rows run in one forward, and where in its hidden states each needed position (a
response token) is predicted: the layouts of `forward`'s outputs, which all give the same [B, T] results.

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
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from roll_algos import pack_sequences
from torch import nn

from roll_strategies.compute.attention_windows import EVERY_LAYER, attention_windows
from roll_strategies.compute.layout_cost import model_pair_weight, prefix_tree_pays
from roll_strategies.compute.logprobs import position_ids_from_mask
from roll_strategies.compute.prefix_tree import TreeForward, row_trie, tree_forward, tree_masks
from roll_strategies.errors import StrategyError

__all__ = ["Run", "layout", "scatter", "tree_mask"]


class Run(NamedTuple):
    """One forward's inputs, and where in its hidden states [R, C] the needed positions are predicted."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | dict[str, torch.Tensor] | None
    rows: torch.Tensor
    cols: torch.Tensor
    tree: TreeForward | None = None
    """The prefix tree this run is (its masks for another model: `tree_mask`), None for padded / packed."""


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


def _padded(ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> Run:
    """The rows as they come, trimmed to their last real column."""
    width = int(mask.bool().any(dim=0).nonzero().max()) + 1 if bool(mask.any()) else 1
    ids, mask = ids[:, :width], mask[:, :width]
    return Run(ids, position_ids_from_mask(mask), mask, rows, cols - 1)


def _packed(
    ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, capacity: int, pad_id: int
) -> Run:
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
    return Run(packed.input_ids.to(device), packed.position_ids.to(device), None, prow, pcol)


def _mask_dtype(model: nn.Module) -> torch.dtype:
    """The dtype the model computes in (its first floating parameter's), for an additive attention mask."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def tree_mask(tree: TreeForward, model: nn.Module | None) -> torch.Tensor | dict[str, torch.Tensor]:
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
) -> Run | None:
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
    return Run(tree.input_ids, tree.position_ids, tree_mask(tree, model), tree.rows, tree.cols, tree)


def layout(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    needed: torch.Tensor,
    pack_capacity: int | None,
    pad_id: int,
    share_prefix: bool = False,
    model: nn.Module | None = None,
    pair_weight: float | None = 0.0,
) -> tuple[Run, torch.Tensor, torch.Tensor]:
    """The forward to run and the (rows, cols) of the needed positions in the batch: under `share_prefix` the
    tree where it pays (`prefix_tree_pays`, one attention pair weighing `pair_weight` tokens; 0: wherever rows share a
    token; None: `model`'s, `layout_cost.model_pair_weight`), its masks built for `model`'s attention windows and
    dtype."""
    rows, cols = _positions(attention_mask, needed)
    if share_prefix:
        weight = model_pair_weight(model) if pair_weight is None else pair_weight  # type: ignore[arg-type]
        tree = _tree(input_ids, attention_mask, rows, cols, model, pack_capacity, weight)
        if tree is not None:
            return tree, rows, cols
    if pack_capacity is None:
        return _padded(input_ids, attention_mask, rows, cols), rows, cols
    return _packed(input_ids, attention_mask, rows, cols, pack_capacity, pad_id), rows, cols


def scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """`values` [N] placed at (rows, cols) of a tensor of zeros of `shape`."""
    return values.new_zeros(shape).index_put((rows, cols), values)
