"""hf_infer's two decoding loops side by side: HF `generate` against the static-cache slot decoder.

    uv run python benchmarks/slot_decode.py [--prompts 16] [--new-tokens 32] [--rounds 3] [--threads 1]

On the project's tiny Qwen2 model and on a Qwen2.5-0.5B-shaped model cut to `--layers` layers (random
weights, its full 151,936-token vocabulary), float32: `--prompts` prompts of 48 to 80 tokens, greedy,
`--new-tokens` new tokens each (the stop id is outside the vocabulary), and the same with half the prompts'
worth of slots (every slot refilled once). The paths run in turn in each round, so load hits them alike; the
table gives the best round's tokens/s, the ratio to `generate`, and whether every row's tokens are
`generate`'s. A CPU says nothing of a GPU's speed: there the decode step's shapes (fixed, so a CUDA graph can
replay it) are what matters; tools/device_check.py measures that.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from roll_strategies import GenerationParams, HFInferStrategy, build_qwen_shaped_model, build_tiny_model


def _models(folder: Path, layers: int) -> dict[str, Path]:
    return {
        "tiny Qwen2 (0.4M)": build_tiny_model(folder / "tiny", vocab_texts=["Left Right Up Down"]),
        f"Qwen2.5-0.5B-shaped, {layers} layers": build_qwen_shaped_model(
            folder / "qwen", num_layers=layers, dtype="float32"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"{args.prompts} prompts x {args.new_tokens} new tokens, greedy, float32, {args.threads} thread(s)\n"
    )
    print("| model | path | tokens/s (best) | vs generate | tokens = generate's |\n|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model_name, folder in _models(Path(tmp), args.layers).items():
            paths = {
                "generate": {"decode": "generate"},
                f"static, {args.prompts} slots": {"decode": "static", "decode_slots": args.prompts},
                f"static, {args.prompts // 2} slots (refill)": {
                    "decode": "static",
                    "decode_slots": max(1, args.prompts // 2),
                },
            }
            strategies = {
                name: HFInferStrategy(folder, strategy_config=config) for name, config in paths.items()
            }
            vocab = strategies["generate"].vocab_size
            gen = torch.Generator().manual_seed(0)
            lengths = torch.randint(48, 81, (args.prompts,), generator=gen).tolist()
            prompts = [torch.randint(8, min(vocab, 4000), (n,), generator=gen).tolist() for n in lengths]
            params = GenerationParams(
                max_new_tokens=args.new_tokens, greedy=True, stop_token_ids=(vocab + 1,)
            )
            best = dict.fromkeys(paths, 0.0)
            outputs = {}
            for _ in range(args.rounds):
                for name, strategy in strategies.items():
                    started = time.perf_counter()
                    out = strategy.generate(prompts, params)
                    best[name] = max(
                        best[name], sum(len(o.output_ids) for o in out) / (time.perf_counter() - started)
                    )
                    outputs[name] = [o.output_ids for o in out]
            for name in paths:
                same = outputs[name] == outputs["generate"]
                ratio = best[name] / best["generate"]
                print(
                    f"| {model_name} | {name} | {best[name]:.0f} | {ratio:.2f} | {'yes' if same else 'no'} |"
                )


if __name__ == "__main__":
    main()
