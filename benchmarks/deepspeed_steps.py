"""deepspeed_train against hf_train on the tiny model, on the CPU: loss agreement and seconds per step.

    uv run python benchmarks/deepspeed_steps.py [--steps 6] [--rows 64] [--width 128]

For hf_train and each ZeRO configuration: strategy construction time, the median seconds of a train step
(one optimiser step over 2 micro-batches of rows/2 x width tokens, NLL loss, entropy on), and the largest
|loss - hf_train loss| over the steps (same data, same seed, same warm-up). All in this one process, so
the numbers are comparable with each other; the 2-core machine is shared, so they are noisy (the
minimum is the least disturbed step; the first step, with one-off set-up, is left out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from roll_strategies import OptimizerSettings, build_tiny_model, create_strategy

CONFIGS = {
    "hf_train": None,
    "zero0": {"zero_optimization": {"stage": 0}},
    "zero1": {"zero_optimization": {"stage": 1}},
    "zero2": {"zero_optimization": {"stage": 2}},
    "zero3": {"zero_optimization": {"stage": 3}},
    "zero2-offload": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}},
    "zero2-bf16": {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}},
}


def nll(log_probs, entropy, mb):
    m = mb["attention_mask"][:, 1:].float()
    return -(log_probs[:, 1:] * m).sum() / m.sum(), {
        "entropy": float((entropy[:, 1:] * m).sum().detach() / m.sum())
    }


def micro_batches(step: int, rows: int, width: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(8, vocab, (rows, width), generator=gen)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    half = rows // 2
    return [{k: v[:half] for k, v in batch.items()}, {k: v[half:] for k, v in batch.items()}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args(argv)
    model_dir = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", vocab_texts=["hello world"])
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    reference: list[float] = []
    print("| strategy | construct s | step s (median) | step s (min) | max abs loss diff vs hf_train |")
    print("|---|---|---|---|---|")
    for name, config in CONFIGS.items():
        dtype = "bfloat16" if config and "bf16" in config else "float32"
        started = time.perf_counter()
        strategy = create_strategy(
            "hf_train" if config is None else "deepspeed_train",
            "train",
            model_dir,
            optimizer=OptimizerSettings(learning_rate=1e-3, warmup_steps=2),
            dtype=dtype,
            **({} if config is None else {"strategy_config": config}),
        )
        construct = time.perf_counter() - started
        losses, seconds = [], []
        for step in range(args.steps):
            mbs = micro_batches(step, args.rows, args.width, vocab)
            started = time.perf_counter()
            losses.append(strategy.train_step(mbs, nll, with_entropy=True)["loss"])
            seconds.append(time.perf_counter() - started)
        reference = reference or losses
        diff = max(abs(a - b) for a, b in zip(losses, reference, strict=True))
        median, fastest = statistics.median(seconds[1:]), min(seconds[1:])
        print(f"| {name} | {construct:.1f} | {median:.3f} | {fastest:.3f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
