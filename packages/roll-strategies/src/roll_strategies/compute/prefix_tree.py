"""The prefix tree (trie) of a micro-batch's rows: shared prefixes run once, exactly.

The rows' real tokens are merged into a trie; its nodes, flattened in depth-first pre-order, are one
sequence for the forward. Each node keeps the position id of its depth (its column in every row it
belongs to) and attends to itself and its ancestors only (`attention_mask`), so its hidden state is the
one every row through it would compute alone. The backward needs nothing special: a shared node's
hidden state feeds several rows' outputs, and autograd sums their gradients into it.

Pre-order makes the ancestor relation an interval test: node j is an ancestor-or-self of node i exactly
when j <= i < end[j], where end[j] is one past the last node of j's subtree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = [
    "PrefixTree",
    "TreeForward",
    "ancestor_mask",
    "attention_mask",
    "build_prefix_tree",
    "cast_mask",
    "tree_forward",
]


class PrefixTree(NamedTuple):
    """The trie of some token sequences, its nodes in depth-first pre-order (N nodes)."""

    tokens: torch.Tensor
    """[N] long: each node's token."""
    depth: torch.Tensor
    """[N] long: each node's 0-based position in every sequence that passes through it."""
    end: torch.Tensor
    """[N] long: one past the last node of each node's subtree."""
    paths: list[list[int]]
    """Per sequence, the node of each of its tokens (path[d] is the node at depth d)."""


def build_prefix_tree(sequences: Sequence[Sequence[int]]) -> PrefixTree:
    """The trie of `sequences` (token-id lists; empty ones get an empty path).

    Sorted lexicographically, each sequence shares its nodes with the one before it up to their common
    prefix and adds the rest as new nodes: that emits the trie in pre-order (any sequence sharing a
    longer prefix with an earlier one shares it with every sequence sorted between them).

    >>> tree = build_prefix_tree([[5, 6, 7], [5, 6, 8], [9]])
    >>> tree.tokens.tolist(), tree.depth.tolist(), tree.paths
    ([5, 6, 7, 8, 9], [0, 1, 2, 2, 0], [[0, 1, 2], [0, 1, 3], [4]])
    """
    seqs = [list(map(int, s)) for s in sequences]
    order = sorted(range(len(seqs)), key=lambda i: seqs[i])
    tokens: list[int] = []
    depth: list[int] = []
    paths: list[list[int]] = [[] for _ in seqs]
    previous: list[int] = []
    previous_path: list[int] = []
    for i in order:
        seq = seqs[i]
        common = 0
        limit = min(len(seq), len(previous))
        while common < limit and seq[common] == previous[common]:
            common += 1
        path = previous_path[:common]
        for d in range(common, len(seq)):
            path.append(len(tokens))
            tokens.append(seq[d])
            depth.append(d)
        paths[i], previous, previous_path = path, seq, path
    return PrefixTree(
        torch.tensor(tokens, dtype=torch.long),
        torch.tensor(depth, dtype=torch.long),
        _subtree_ends(depth),
        paths,
    )


def _subtree_ends(depth: list[int]) -> torch.Tensor:
    """end[j] for nodes in pre-order: the first later node no deeper than j (or N)."""
    end = [len(depth)] * len(depth)
    open_nodes: list[int] = []  # a stack of the current node's ancestors, deepest last
    for i, d in enumerate(depth):
        while open_nodes and depth[open_nodes[-1]] >= d:
            end[open_nodes.pop()] = i
        open_nodes.append(i)
    return torch.tensor(end, dtype=torch.long)


def ancestor_mask(tree: PrefixTree, device: torch.device | str | None = None) -> torch.Tensor:
    """[N, N] bool: [i, j] is True where node j is node i itself or one of its ancestors."""
    n = int(tree.tokens.numel())
    idx = torch.arange(n, device=device)
    end = tree.end.to(device)
    return (idx[None, :] <= idx[:, None]) & (idx[:, None] < end[None, :])


def attention_mask(
    tree: PrefixTree, dtype: torch.dtype, device: torch.device | str | None = None
) -> torch.Tensor:
    """[1, 1, N, N] additive float mask in `dtype`: 0 where a node may attend (itself, its ancestors), the
    dtype's lowest value elsewhere. Float, not bool: eager attention reads a bool 4D mask differently."""
    allowed = ancestor_mask(tree, device)
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=device), blocked)[None, None]


def cast_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask of `attention_mask` in another dtype (the lowest value of a wider dtype would
    overflow a narrower one)."""
    if mask.dtype == dtype:
        return mask
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask == 0, zero, torch.finfo(dtype).min)


class TreeForward(NamedTuple):
    """One forward over a micro-batch's trie: inputs [1, N] and where each needed output is predicted."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    cols: torch.Tensor
    """[K] the node of each needed position's previous token (the hidden state that predicts it)."""


def tree_forward(
    input_ids: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    dtype: torch.dtype,
) -> TreeForward | None:
    """The trie forward of rows whose real tokens are input_ids[b, starts[b] : starts[b] + lengths[b]],
    reading outputs at (rows, cols) (each predicted by the token before it); None when no two rows share
    a first token (every branch at the root: the trie saves nothing and the dense forward runs instead)."""
    device = input_ids.device
    host_ids, host_starts, host_lengths = input_ids.cpu(), starts.tolist(), lengths.tolist()
    seqs = [
        host_ids[b, s : s + n].tolist()
        for b, (s, n) in enumerate(zip(host_starts, host_lengths, strict=True))
    ]
    tree = build_prefix_tree(seqs)
    if int(tree.tokens.numel()) == sum(host_lengths):
        return None
    offsets = torch.tensor([0, *host_lengths], dtype=torch.long).cumsum(0)[:-1].to(device)
    flat_nodes = torch.tensor([n for path in tree.paths for n in path], dtype=torch.long, device=device)
    nodes = flat_nodes[offsets[rows] + (cols - 1 - starts[rows])]
    return TreeForward(
        tree.tokens.to(device)[None],
        tree.depth.to(device)[None],
        attention_mask(tree, dtype, device),
        nodes,
    )
