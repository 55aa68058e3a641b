"""The fold of a bf16 model's gradients into its float32 master gradients, once per micro-batch
(`roll_strategies.train.master_weights.fold_gradient`), against the whole-tensor upcast it replaced.

    uv run python benchmarks/gradient_fold.py [--rounds 10] [--threads 1 2]

The gradients have SmolLM2-135M's shapes (30 layers, 576 wide, a 49,152 x 576 embedding) and are fresh each
round, as autograd hands them over. Both ways run in turn in each round, so load hits them alike; the table
gives the median and the best round in seconds per micro-batch.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from roll_strategies.train.master_weights import fold_gradient

LAYER = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
    (576,),
    (576,),
]
SHAPES = [(49152, 576), *(LAYER * 30), (576,)]


def rounds_and_threads(doc: str, rounds: int) -> argparse.Namespace:
    """The command line of these CPU timings: `--rounds` and `--threads` (a table per thread count)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    return parser.parse_args()


def print_times(threads: int, times: dict[str, list[float]]) -> None:
    """One table row per way timed: its median and best round in seconds."""
    for name, values in times.items():
        print(f"| {threads} | {name} | {statistics.median(values):.3f} | {min(values):.3f} |")


def upcast_then_add(master: torch.Tensor, grad: torch.Tensor) -> None:
    """The fold before `fold_gradient`: the whole gradient upcast to a float32 temporary, then added."""
    master.add_(grad.float())


def main() -> None:
    args = rounds_and_threads(__doc__, rounds=10)
    params = sum(torch.Size(s).numel() for s in SHAPES)
    print(f"{params / 1e6:.1f}M bf16 gradients folded into float32, seconds per micro-batch\n")
    print("| threads | fold | median | best |\n|---|---|---:|---:|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        masters = [torch.zeros(s) for s in SHAPES]
        times: dict[str, list[float]] = {"upcast then add": [], "fold_gradient": []}
        for _ in range(args.rounds):
            for name, fold in (("upcast then add", upcast_then_add), ("fold_gradient", fold_gradient)):
                grads = [torch.randn(s, dtype=torch.bfloat16) for s in SHAPES]  # fresh, as from autograd
                start = time.perf_counter()
                for master, grad in zip(masters, grads, strict=True):
                    fold(master, grad)
                times[name].append(time.perf_counter() - start)
                del grads
        print_times(threads, times)


if __name__ == "__main__":
    main()
