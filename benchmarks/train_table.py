"""Print the P4 table (train-path padding and tokens/s: naive, fixed, dynamic batching, packing).

    uv run python benchmarks/train_table.py                 # trajectory rows, 64 + 64 episodes
    uv run python benchmarks/train_table.py --shape step    # one row per turn
    uv run python benchmarks/train_table.py --threads 2 --repeats 5

Ratios are between rows of one run (same load); compare absolute numbers only on the same machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import train_bench as tb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=["trajectory", "step"], default="trajectory")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per env (FrozenLake, Sokoban)")
    parser.add_argument("--rows", type=int, default=16, help="rows per fixed micro-batch")
    parser.add_argument("--budget", type=int, default=8192, help="tokens per dynamic / packed micro-batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results, info = tb.run(args.episodes, args.shape, args.rows, args.budget, args.repeats)
    naive = results[0]
    print(
        f"P4 ({args.shape} rows: {int(info['rows'])}, lengths {int(info['min'])}-{int(info['max'])}, median "
        f"{int(info['median'])}; {args.rows} rows / fixed micro-batch, budget {args.budget} tokens; "
        f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f})"
    )
    print(
        "| mode | micro-batches | padding | train tokens/s (wall, min) | vs naive | tokens per CPU s | vs naive |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.mode} | {r.micro_batches} | {r.padding:.1%} | {r.tokens_per_s:,.0f} | "
            f"{r.tokens_per_s / naive.tokens_per_s:.2f}x | {r.tokens_per_cpu_s:,.0f} | "
            f"{r.tokens_per_cpu_s / naive.tokens_per_cpu_s:.2f}x |"
        )


if __name__ == "__main__":
    main()
