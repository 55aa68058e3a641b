"""When a prefix tree pays: forward+backward times of the dense rows, the forced tree and `share_prefix` (the rule
of `roll_strategies.compute.layout_cost` choosing), side by side, and the fit of the rule's constant.

    OMP_NUM_THREADS=1 uv run python benchmarks/prefix_tree_cost.py [--rounds 5] [--shapes tiny smollm2]
    OMP_NUM_THREADS=1 uv run python benchmarks/prefix_tree_cost.py --match 480 --rounds 21   # one case, no fit

Each case is one micro-batch of random token rows (a shared start, each row's own rest, the last tokens of each
row its response, where the log-probs are read) on a Qwen2 of random weights built offline: `tiny` (the builtin
tiny model's shape, 2 layers of 128) and `smollm2` (SmolLM2-135M's width, 576, with 1 of its 30 layers: the
rule's per-layer ratio is what matters). Each round runs every case dense, as a tree and under the rule in turn,
so load hits them alike; the table gives medians in ms. The fit is least squares of the dense and tree times on
(tokens, pairs, response positions, 1); its pair / token coefficient over the FLOP ratio of the shape is the
attention FLOP's cost in per-token-layer FLOPs (`PAIR_FLOP_COST`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from roll_strategies.compute.forward import lm_outputs
from roll_strategies.compute.layout_cost import (
    PAIR_FLOP_COST,
    Work,
    model_pair_weight,
    padded_work,
    tree_work,
)
from roll_strategies.compute.prefix_tree import build_prefix_tree
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {
    "tiny": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4},
    "smollm2": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 1,
        "num_attention_heads": 9,
    },
}
KV_HEADS = {"tiny": 2, "smollm2": 3}
Rows = list[list[int]]


def grouped(groups: int, per_group: int, shared: int, own: int, gen: torch.Generator) -> Rows:
    """`groups` prompts of `shared` tokens, each with `per_group` rows of `own` tokens of their own."""
    out = []
    for _ in range(groups):
        prompt = torch.randint(1, 400, (shared,), generator=gen).tolist()
        out += [prompt + torch.randint(1, 400, (own,), generator=gen).tolist() for _ in range(per_group)]
    return out


def four_choice(gen: torch.Generator) -> Rows:
    """A micro-batch of the SmolLM2 four_choice recipe: 32 rows, 4 groups of 8 over 2 prompts of 79 tokens (a
    60-token instruction all share), 6-token answers (85 tokens a row, as its 5,440 tokens over 64 rows)."""
    instruction = torch.randint(1, 400, (60,), generator=gen).tolist()
    prompts = [instruction + torch.randint(1, 400, (19,), generator=gen).tolist() for _ in range(2)]
    return [p + torch.randint(1, 400, (6,), generator=gen).tolist() for p in prompts for _ in range(16)]


def turns(gen: torch.Generator, system: int = 100, turn: int = 40) -> Rows:
    """A micro-batch of 8 step-wise rows of FrozenLake with the whole episode as history: turns 1-6 of one
    episode and 1-2 of another (one system turn), each row its history and one turn of 40 tokens."""
    head = torch.randint(1, 400, (system,), generator=gen).tolist()
    rows = []
    for count in (6, 2):
        episode = [torch.randint(1, 400, (turn,), generator=gen).tolist() for _ in range(count)]
        rows += [head + [tok for part in episode[: t + 1] for tok in part] for t in range(count)]
    return rows


def cases(gen: torch.Generator) -> dict[str, Rows]:
    return {
        "8 x (16 shared + 480 own)": grouped(1, 8, 16, 480, gen),
        "8 x (64 + 192)": grouped(1, 8, 64, 192, gen),
        "8 x (256 + 64)": grouped(1, 8, 256, 64, gen),
        "8 x (384 + 16)": grouped(1, 8, 384, 16, gen),
        "16 x (128 + 32)": grouped(1, 16, 128, 32, gen),
        "2 groups x 8 x (150 + 8)": grouped(2, 8, 150, 8, gen),
        "four_choice micro-batch (32 rows)": four_choice(gen),
        "multi-turn history (8 rows)": turns(gen),
    }


def batch(rows: Rows, answer: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, mask, and the last `answer` tokens of each row as the needed positions."""
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    needed = torch.zeros_like(ids, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, : len(r)], mask[b, : len(r)] = torch.tensor(r), 1
        needed[b, len(r) - answer : len(r)] = True
    return ids, mask, needed


def timed(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000


def fit(points: list[tuple[Work, int, float]]) -> torch.Tensor:
    """Least-squares (per token, per pair, per response position, fixed) ms of the observed times."""
    x = torch.tensor([[w.tokens, w.pairs, k, 1.0] for w, k, _ in points], dtype=torch.float64)
    y = torch.tensor([[ms] for _, _, ms in points], dtype=torch.float64)
    scale = x.abs().max(dim=0).values
    return torch.linalg.lstsq(x / scale, y).solution.flatten() / scale


def run_shape(name: str, rounds: int, match: str) -> None:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512, num_key_value_heads=KV_HEADS[name], max_position_embeddings=4096, **SHAPES[name]
    )
    config._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(config).train()
    weight = model_pair_weight(model)
    batches = {k: batch(v) for k, v in cases(torch.Generator().manual_seed(1)).items() if match in k}

    def step(ids: torch.Tensor, mask: torch.Tensor, needed: torch.Tensor, share: bool, forced: bool) -> None:
        model._roll_pair_weight = 0.0 if forced else weight  # 0: the tree wherever rows share a token
        lm_outputs(model, ids, mask, needed, share_prefix=share).log_probs.sum().backward()
        model.zero_grad(set_to_none=True)

    times: dict[str, dict[str, list[float]]] = {k: {"dense": [], "tree": [], "rule": []} for k in batches}
    for ids, mask, needed in batches.values():  # warm-up
        step(ids, mask, needed, True, True)
    for _ in range(rounds):
        for case, inputs in batches.items():
            for layout, share, forced in (
                ("dense", False, False),
                ("tree", True, True),
                ("rule", True, False),
            ):
                times[case][layout].append(timed(lambda: step(*inputs, share, forced)))  # noqa: B023 (run at once)
    points, rows_out = [], []
    for case, (ids, mask, needed) in batches.items():
        lengths = mask.sum(dim=1).tolist()
        real = [ids[b, : lengths[b]].tolist() for b in range(len(lengths))]
        dense, tree = padded_work(lengths), tree_work([int(build_prefix_tree(real).tokens.numel())])
        k = int(needed.sum())
        med = {layout: statistics.median(v) for layout, v in times[case].items()}
        points += [(dense, k, med["dense"]), (tree, k, med["tree"])]
        picks = "tree" if tree.cost(weight) < dense.cost(weight) else "dense"
        rows_out.append((case, dense, tree, med, picks))
    flop_ratio = weight / PAIR_FLOP_COST
    print(
        f"\n{name}: pair weight {weight:.2e} tokens (FLOP ratio {flop_ratio:.2e} x PAIR_FLOP_COST {PAIR_FLOP_COST})"
    )
    if len(points) >= 8:  # four coefficients: fewer cases leave the fit underdetermined or all noise
        per_token, per_pair, _, _ = fit(points).tolist()
        print(
            f"fit: {per_token * 1e3:.3f} us a token, {per_pair * 1e6:.3f} ns a pair: pair / token"
            f" {per_pair / per_token:.2e} = {per_pair / per_token / flop_ratio:.2f} x the FLOP ratio (the measured"
            " PAIR_FLOP_COST)"
        )
    print(
        "| case | rows | dense tokens / pairs | tree nodes / pairs | dense ms | tree ms | tree / dense | rule picks"
        " (cost tree / dense) | share_prefix ms | share_prefix / dense |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for case, dense, tree, med, picks in rows_out:
        ratio = tree.cost(weight) / dense.cost(weight)
        print(
            f"| {case} | {len(batches[case][0])} | {dense.tokens:,} / {dense.pairs / 1e6:.2f}M | {tree.tokens:,} /"
            f" {tree.pairs / 1e6:.2f}M | {med['dense']:.0f} | {med['tree']:.0f} | {med['tree'] / med['dense']:.2f}"
            f" | {picks} ({ratio:.2f}) | {med['rule']:.0f} | {med['rule'] / med['dense']:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--match", default="", help="only the cases whose name holds this text")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, float32, sdpa, medians of {args.rounds} rounds")
    for name in args.shapes:
        run_shape(name, args.rounds, args.match)


if __name__ == "__main__":
    main()
