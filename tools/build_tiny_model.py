"""Build the project's tiny offline causal LM (no hub needed): `uv run python tools/build_tiny_model.py --out DIR`.

Generic build: a small built-in English corpus for the vocabulary and no format warm-up. The pipeline
builds env-specific models (its own corpora and warm-up examples) with roll_strategies.build_tiny_model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from roll_strategies import build_tiny_model

BUILTIN_CORPUS = [
    "You are a helpful assistant playing a game in a text environment.",
    "You are solving the FrozenLake puzzle. Move the player to the goal without falling into a hole.",
    "You are solving the Sokoban puzzle. Push every box onto a target; boxes cannot be pulled.",
    "The grid symbols are: P player, G goal, O hole, X box, the wall, and the empty floor.",
    "Decide your next action. Valid actions are Left, Right, Up and Down.",
    "Answer with your action in the format <answer>Direction</answer>, for example <answer>Left</answer>.",
    "You may think first inside <think> and </think> tags, then give the answer.",
    "Your action was invalid. Your action had no effect. You reached the goal. You fell into a hole.",
    "Search for a product, click on it, select options, and buy now. Back to search. Next page.",
    "The current observation is shown below. Turn step reward total success episode done.",
    "yes no left right up down one two three four five six seven eight nine zero",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write (created)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--num-kv-heads", type=int, default=2)
    parser.add_argument("--intermediate-size", type=int, default=256)
    parser.add_argument(
        "--vocab-file",
        type=Path,
        action="append",
        default=[],
        help="extra text file whose words join the vocabulary (repeatable)",
    )
    args = parser.parse_args(argv)
    texts = BUILTIN_CORPUS + [p.read_text(encoding="utf-8") for p in args.vocab_file]
    start = time.perf_counter()
    out = build_tiny_model(
        args.out,
        vocab_texts=texts,
        seed=args.seed,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        intermediate_size=args.intermediate_size,
    )
    info = json.loads((out / "build_info.json").read_text())
    print(
        f"built {out} in {time.perf_counter() - start:.1f}s: {info['num_parameters']:,} parameters, "
        f"vocab {info['vocab_size']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
