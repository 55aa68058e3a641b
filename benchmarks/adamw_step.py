"""One AdamW step over SmolLM2-135M's float32 master weights on the CPU: torch's per-tensor loop (its CPU
default), its foreach path, and the fused kernel `roll_strategies.train.schedules.adamw_with_warmup` picks.

    uv run python benchmarks/adamw_step.py [--rounds 5] [--threads 1 2]

The parameters have SmolLM2-135M's shapes (30 layers, 576 wide, a 49,152 x 576 embedding), each with a gradient.
The three run in turn in each round, so load hits them alike; the table gives the median and the best round in
seconds per step, and the largest difference of the fused weights from the loop's after all rounds.
"""

from __future__ import annotations

import time

import torch
from gradient_fold import SHAPES, print_times, rounds_and_threads

KINDS = {"loop (CPU default)": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def main() -> None:
    args = rounds_and_threads(__doc__, rounds=5)
    numel = sum(torch.Size(s).numel() for s in SHAPES)
    print(f"AdamW over {numel / 1e6:.1f}M float32 parameters, seconds per step\n")
    print("| threads | AdamW | median | best |\n|---|---|---:|---:|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        gen = torch.Generator().manual_seed(0)
        start = [torch.randn(s, generator=gen) * 0.02 for s in SHAPES]
        grads = [torch.randn(s, generator=gen) * 1e-3 for s in SHAPES]
        params: dict[str, list[torch.nn.Parameter]] = {}
        optimizers = {}
        for name, kw in KINDS.items():
            params[name] = [torch.nn.Parameter(w.clone()) for w in start]
            for p, g in zip(params[name], grads, strict=True):
                p.grad = g
            optimizers[name] = torch.optim.AdamW(params[name], lr=1e-4, weight_decay=0.01, **kw)
        times: dict[str, list[float]] = {name: [] for name in KINDS}
        for _ in range(args.rounds):
            for name, optimizer in optimizers.items():
                begin = time.perf_counter()
                optimizer.step()
                times[name].append(time.perf_counter() - begin)
        print_times(threads, times)
        diff = max(
            float((a.detach() - b.detach()).abs().max())
            for a, b in zip(params["fused"], params["loop (CPU default)"], strict=True)
        )
        print(f"\nmax |fused - loop| after {args.rounds} steps at {threads} thread(s): {diff:.2e}\n")


if __name__ == "__main__":
    main()
