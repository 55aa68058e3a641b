"""A micro-batch of unrelated groups as a prefix tree: one row per root's subtree (`tree_forward`) against all
subtrees in one sequence with one N x N mask (the layout it replaced), forward + backward of a tiny random
Qwen2 in float32 on the CPU, side by side in one process (alternating, the median of `--repeats`).

    uv run python benchmarks/tree_rows_bench.py --groups 4 --rows 4 --prompt 200 --response 50
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from roll_strategies.compute.prefix_tree import TreeForward, tree_forward, tree_masks
from transformers import Qwen2Config, Qwen2ForCausalLM


def _one_sequence(tree: TreeForward) -> TreeForward:
    """The same trie as one row: its nodes in pre-order (the rows' nodes concatenated), one N x N mask."""
    nodes = tree.nodes[tree.nodes >= 0].sort().values
    depth = torch.zeros_like(nodes)
    depth[tree.nodes[tree.nodes >= 0]] = tree.position_ids[tree.nodes >= 0]
    tokens = torch.zeros_like(nodes)
    tokens[tree.nodes[tree.nodes >= 0]] = tree.input_ids[tree.nodes >= 0]
    return tree._replace(
        input_ids=tokens[None], position_ids=depth[None], nodes=nodes[None], sizes=[len(nodes)]
    )


def _step(model: torch.nn.Module, tree: TreeForward) -> float:
    mask = tree_masks(tree, {"full_attention": None}, torch.float32)
    start = time.perf_counter()
    out = model(
        input_ids=tree.input_ids, position_ids=tree.position_ids, attention_mask=mask, use_cache=False
    )
    out.logits.float().logsumexp(-1).mean().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--response", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=4096,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config).float()
    gen = torch.Generator().manual_seed(1)
    seqs = []
    for g in range(args.groups):
        prompt = torch.cat([torch.tensor([g + 1]), torch.randint(1, 256, (args.prompt - 1,), generator=gen)])
        seqs += [
            torch.cat([prompt, torch.randint(1, 256, (args.response,), generator=gen)])
            for _ in range(args.rows)
        ]
    ids = torch.stack(seqs)
    n = ids.shape[1]
    starts, lengths = torch.zeros(len(seqs), dtype=torch.long), torch.full((len(seqs),), n)
    rows, cols = torch.arange(len(seqs)), torch.full((len(seqs),), n - 1)
    per_root = tree_forward(ids, starts, lengths, rows, cols)
    assert per_root is not None
    layouts = {"a row per root": per_root, "one sequence": _one_sequence(per_root)}
    times: dict[str, list[float]] = {k: [] for k in layouts}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, tree in layouts.items():
            model.zero_grad(set_to_none=True)
            times[name].append(_step(model, tree))
    median = {k: statistics.median(v[1:]) for k, v in times.items()}
    shapes = {k: tuple(t.input_ids.shape) for k, t in layouts.items()}
    for name in layouts:
        print(f"{name:>16}: inputs {shapes[name]}, forward + backward {median[name] * 1e3:.1f} ms")
    print(f"one sequence / a row per root: {median['one sequence'] / median['a row per root']:.2f}x")


if __name__ == "__main__":
    main()
