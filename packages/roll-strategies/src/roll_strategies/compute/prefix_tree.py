"""The prefix tree (trie) of a micro-batch's rows: shared prefixes run once, exactly.

The rows' real tokens are merged into a trie, its nodes in depth-first pre-order; each root's subtree
(the rows sharing a first token) is one right-padded row of the forward, so unrelated rows never share a
mask. Each node keeps the position id of its depth (its column in every row it belongs to) and attends to
itself and its ancestors only (`tree_masks`; a sliding-window layer to those fewer than its window
positions above it), so its hidden state is the one every row through it would compute alone. The backward needs nothing special: a shared node's
hidden state feeds several rows' outputs, and autograd sums their gradients into it.

Pre-order makes the ancestor relation an interval test: node j is an ancestor-or-self of node i exactly
when j <= i < end[j], where end[j] is one past the last node of j's subtree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

__all__ = [
    "PrefixTree",
    "TreeForward",
    "ancestor_mask",
    "build_prefix_tree",
    "root_sizes",
    "row_trie",
    "tree_forward",
    "tree_masks",
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


class TreeForward(NamedTuple):
    """One forward over a micro-batch's trie, each root's subtree one right-padded row: inputs [G, M]."""

    input_ids: torch.Tensor
    """[G, M] each column's token (0 on padding)."""
    position_ids: torch.Tensor
    """[G, M] each column's depth (0 on padding)."""
    nodes: torch.Tensor
    """[G, M] each column's node in the whole trie, -1 on padding."""
    end: torch.Tensor
    """[N] the trie's subtree ends (`PrefixTree.end`), on the inputs' device."""
    rows: torch.Tensor
    cols: torch.Tensor
    """[K] the row and column of each needed position's previous token (the hidden state that predicts it)."""
    sizes: list[int]
    """The node count of each row: what the forward costs (G rows of max(sizes) columns)."""


def root_sizes(tree: PrefixTree) -> list[int]:
    """The node count of each root's subtree, in pre-order: the rows the tree forward runs (`tree_forward`).

    >>> root_sizes(build_prefix_tree([[5, 6, 7], [5, 6, 8], [9]]))
    [4, 1]
    """
    roots = (tree.depth == 0).nonzero().flatten().tolist()
    return [int(tree.end[r]) - r for r in roots]


def _batched(tree: PrefixTree) -> tuple[torch.Tensor, list[int]]:
    """[G, M] the trie's node in each column when every root's subtree is a row of its own, right-padded
    with -1 (pre-order makes a subtree the interval [root, end[root])), and each row's node count."""
    roots = (tree.depth == 0).nonzero().flatten().tolist()
    sizes = root_sizes(tree)
    width = max(sizes, default=0)
    nodes = torch.full((len(roots), width), -1, dtype=torch.long)
    for g, (root, size) in enumerate(zip(roots, sizes, strict=True)):
        nodes[g, :size] = torch.arange(root, root + size)
    return nodes, sizes


def tree_masks(
    forward: TreeForward, windows: Mapping[str, int | None], dtype: torch.dtype
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive masks [G, 1, M, M] in `dtype` of a `TreeForward`, one per attention window: 0 where a
    node may attend (itself, and its ancestors fewer than `window` positions above it, the window of
    transformers' `sliding_window_overlay`: kv > q - window), the dtype's lowest value elsewhere; padding
    attends to itself only. `windows` maps layer types to windows (None: full attention): one tensor
    when every layer has the same window, else a dict keyed by layer type. Float, not bool: eager
    attention reads a bool 4D mask differently."""
    nodes, depth = forward.nodes, forward.position_ids
    end = torch.where(nodes >= 0, forward.end[nodes.clamp(min=0)], -1)
    q, k = nodes[:, :, None], nodes[:, None, :]
    ancestor = (k >= 0) & (k <= q) & (q < end[:, None, :])
    own = torch.eye(nodes.shape[1], dtype=torch.bool, device=nodes.device)[None] & (q < 0)
    distance = depth[:, :, None] - depth[:, None, :]
    zero = torch.zeros((), dtype=dtype, device=nodes.device)
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=nodes.device)

    def mask(window: int | None) -> torch.Tensor:
        allowed = ancestor if window is None else ancestor & (distance < window)
        return torch.where(allowed | own, zero, blocked)[:, None]

    by_window = {w: mask(w) for w in set(windows.values())}
    if len(by_window) == 1:
        return next(iter(by_window.values()))
    return {layer_type: by_window[w] for layer_type, w in windows.items()}


def row_trie(input_ids: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> PrefixTree:
    """The trie of the rows whose real tokens are input_ids[b, starts[b] : starts[b] + lengths[b]]."""
    host_ids = input_ids.cpu()
    return build_prefix_tree(
        [
            host_ids[b, s : s + n].tolist()
            for b, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True))
        ]
    )


def tree_forward(
    input_ids: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    tree: PrefixTree | None = None,
) -> TreeForward | None:
    """The trie forward of rows whose real tokens are input_ids[b, starts[b] : starts[b] + lengths[b]],
    reading outputs at (rows, cols) (each predicted by the token before it); None when no two rows share
    a first token (every branch at the root: the trie saves nothing and the dense forward runs instead).
    Rows of unrelated roots never share a mask: each root's subtree is a batch row of its own. `tree`: the
    rows' trie where the caller built it already (`row_trie`)."""
    device = input_ids.device
    host_lengths = lengths.tolist()
    if tree is None:
        tree = row_trie(input_ids, starts, lengths)
    if int(tree.tokens.numel()) == sum(host_lengths):
        return None
    nodes, sizes = _batched(tree)
    valid = nodes >= 0
    where = torch.full((len(tree.tokens), 2), -1, dtype=torch.long)  # each node's (row, column)
    where[nodes[valid]] = valid.nonzero()
    offsets = torch.tensor([0, *host_lengths], dtype=torch.long).cumsum(0)[:-1].to(device)
    flat_nodes = torch.tensor([n for path in tree.paths for n in path], dtype=torch.long, device=device)
    at = where.to(device)[flat_nodes[offsets[rows] + (cols - 1 - starts[rows])]]
    safe = nodes.clamp(min=0)
    return TreeForward(
        torch.where(valid, tree.tokens[safe], 0).to(device),
        torch.where(valid, tree.depth[safe], 0).to(device),
        nodes.to(device),
        tree.end.to(device),
        at[:, 0],
        at[:, 1],
        sizes,
    )
