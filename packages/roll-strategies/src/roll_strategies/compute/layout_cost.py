"""Whether a micro-batch's prefix tree pays: the work of the tree against the padded or packed rows, from counts.

A forward's work is two terms: each position runs the per-token layers (projections, MLP, norms) once, and the
attention kernel scores every (query, key) pair its mask spans, masked or not:

    cost = tokens + pair_weight * pairs

in units of one token through the per-token layers (`pair_weight`: one pair's cost). The tree runs a row per
root's subtree, right-padded to the largest (M nodes), each with a dense [M, M] ancestor mask, so G rows cost
G x M tokens and G x M^2 pairs; padded rows [B, T] cost B x T^2 (their padding mask is 4D
too), packed rows of capacity C each C^2 (a block-diagonal mask over the whole row). The LM head runs at the
same response positions in every layout and cancels out.

The tree saves tokens (a shared prefix runs once) and pays pairs (its distinct tokens all see one another's
slots): a group's long prompt over short answers pays, rows of long own suffixes over a short shared start do
not (8 rows of 16 shared + 480 own tokens: the tree spans 3,856 nodes, 14.9M pairs against the rows' 2.0M).

`pair_weight(model)` is one pair's FLOPs over one token's in the per-token layers (4 x query width per layer
against 2 x the non-embedding parameters), times `PAIR_FLOP_COST`, the measured cost of an attention-kernel FLOP
in per-token-layer FLOPs (`benchmarks/prefix_tree_cost.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from roll_algos.packing import pack_lengths
from torch import nn

from roll_strategies.compute.prefix_tree import PrefixTree, build_prefix_tree, root_sizes
from roll_strategies.errors import StrategyError

__all__ = [
    "PAIR_FLOP_COST",
    "Work",
    "model_pair_weight",
    "packed_work",
    "padded_work",
    "pair_weight",
    "prefix_tree_pays",
    "tree_pays",
    "tree_work",
    "trie_pays",
]

PAIR_FLOP_COST = 1.0
"""What one FLOP of the masked attention kernel (sdpa, forward and backward) costs in FLOPs of the per-token layers:
least-squares fits of forward+backward times on a loaded 2-core AMD EPYC (Zen 3), float32, 1 thread, read 0.91-1.56
at SmolLM2's width and 0.99-2.84 at the tiny Qwen2's (`benchmarks/prefix_tree_cost.py`, docs/benchmarks.md); the
benchmark's picks are the same anywhere in that range. Measured on that CPU only: a GPU's kernels weigh pairs otherwise (the issue's H200 gains of 0.93-1.31x at a 384-token
prompt were not re-measured)."""


class Work(NamedTuple):
    """What one forward computes: positions through the per-token layers, and attention pairs scored."""

    tokens: int
    pairs: int

    def cost(self, weight: float) -> float:
        """tokens + weight x pairs (`weight`: one pair's cost in tokens, `pair_weight`)."""
        return self.tokens + weight * self.pairs


def padded_work(lengths: Sequence[int]) -> Work:
    """Rows [B, T] trimmed to their longest: B x T tokens, B x T^2 pairs.

    >>> padded_work([3, 5])
    Work(tokens=10, pairs=50)
    """
    width = max(lengths, default=0)
    return Work(len(lengths) * width, len(lengths) * width * width)


def packed_work(lengths: Sequence[int], capacity: int) -> Work:
    """The rows packed best-fit into rows of `capacity` tokens (at least the longest, as `forward` packs them):
    R x C tokens, R x C^2 pairs.

    >>> packed_work([3, 5, 2], 6)
    Work(tokens=12, pairs=72)
    """
    present = [n for n in lengths if n > 0]
    if not present:
        return Work(0, 0)
    width = max(capacity, max(present))
    rows = len(pack_lengths(present, width))
    return Work(rows * width, rows * width * width)


def tree_work(node_counts: Sequence[int]) -> Work:
    """Tree rows of these node counts, run as [rows, the largest count] (one tree: one row of N nodes, N^2 pairs).

    >>> tree_work([7]), tree_work([4, 6])
    (Work(tokens=7, pairs=49), Work(tokens=12, pairs=72))
    """
    return padded_work(node_counts)


def tree_pays(
    node_counts: Sequence[int], lengths: Sequence[int], capacity: int | None, weight: float
) -> bool:
    """Whether the tree rows (`node_counts`) cost less than the micro-batch's rows of real `lengths` run padded
    (`capacity` None) or packed into rows of `capacity`, one pair weighing `weight` tokens.

    >>> tree_pays([16 + 8 * 480], [496] * 8, None, 0.001)  # long own suffixes: 3,856 + 14.9k against 3,968 + 2.0k
    False
    >>> tree_pays([150 + 32 * 6], [156] * 32, None, 0.001)  # one prompt, short answers: 342 + 117 against 4,992 + 779
    True
    """
    if weight < 0:
        raise StrategyError(
            f"Expected a pair weight >= 0 (one attention pair's cost in tokens), got {weight}."
        )
    rows = padded_work(lengths) if capacity is None else packed_work(lengths, capacity)
    return tree_work(node_counts).cost(weight) < rows.cost(weight)


def trie_pays(sequences: Sequence[Sequence[int]], capacity: int | None, weight: float) -> tuple[bool, int]:
    """(whether the rows' prefix tree pays, its node count) for rows of these real token ids, the tree run as
    `prefix_tree.tree_forward` runs it (a row per root's subtree) against the rows padded or packed into
    `capacity` (`tree_pays`). The one decision both the strategies' forward and the trainer's token count read.

    >>> trie_pays([[1, 2, 3], [1, 2, 4]], None, 0.0)  # 4 nodes against 6 tokens, pairs free
    (True, 4)
    """
    tree = build_prefix_tree(sequences)
    return prefix_tree_pays(tree, [len(s) for s in sequences], capacity, weight), int(tree.tokens.numel())


def prefix_tree_pays(tree: PrefixTree, lengths: Sequence[int], capacity: int | None, weight: float) -> bool:
    """`trie_pays` for a trie already built (`prefix_tree.build_prefix_tree`) of rows of real `lengths`.

    >>> prefix_tree_pays(build_prefix_tree([[1, 2, 3], [1, 2, 4]]), [3, 3], None, 0.0)
    True
    """
    return tree_pays(root_sizes(tree), lengths, capacity, weight)


def pair_weight(layers: int, query_width: int, body_parameters: int) -> float:
    """One attention pair's cost in tokens: its FLOPs (4 x `query_width` a layer: the scores and the weighted
    values) over a token's in the per-token layers (2 x `body_parameters`, every parameter but the embeddings),
    times `PAIR_FLOP_COST`.

    >>> round(pair_weight(layers=2, query_width=128, body_parameters=296_064), 6)  # the tiny Qwen2's shape
    0.001729
    """
    if layers < 1 or query_width < 1 or body_parameters < 1:
        raise StrategyError(
            f"Expected layers, query width and body parameters >= 1, got {layers}, {query_width}, "
            f"{body_parameters}; pass the model's own shape (model_pair_weight reads it from its config)."
        )
    return PAIR_FLOP_COST * (4 * layers * query_width) / (2 * body_parameters)


def model_pair_weight(model: nn.Module) -> float:
    """`pair_weight` of a Hugging Face model (or a DeepSpeed engine wrapping one), from its config's layers and
    heads and its parameters; cached on the model."""
    cached = getattr(model, "_roll_pair_weight", None)
    if cached is not None:
        return float(cached)
    inner = getattr(model, "module", model)
    config = getattr(inner, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    head_dim = getattr(config, "head_dim", None) or (
        getattr(config, "hidden_size", 0) // heads if heads else None
    )
    if not (layers and heads and head_dim):
        raise StrategyError(
            f"Expected a model config with num_hidden_layers, num_attention_heads and hidden_size (or head_dim) "
            f"to weigh a prefix tree's attention, got {type(config).__name__}; set share_prefix=false for this "
            "model."
        )
    embeddings = {id(p) for m in _embeddings(inner) for p in m.parameters()}
    body = sum(getattr(p, "ds_numel", p.numel()) for p in inner.parameters() if id(p) not in embeddings)
    weight = pair_weight(int(layers), int(heads) * int(head_dim), max(int(body), 1))
    model._roll_pair_weight = weight  # type: ignore[attr-defined]
    return weight


def _embeddings(model: nn.Module) -> list[nn.Module]:
    """The input embedding and an LM head (neither runs per token of the body: a lookup, and the head only at
    the response positions)."""
    found = []
    for name in ("get_input_embeddings", "get_output_embeddings"):
        getter = getattr(model, name, None)
        module = getter() if callable(getter) else None
        if isinstance(module, nn.Module):
            found.append(module)
    return found
