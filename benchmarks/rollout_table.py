"""Print the rollout benchmark table (P1, P2, P3, P5), every row measured side by side in this run.

    uv run python benchmarks/rollout_table.py            # everything (~10 min on 2 cores)
    uv run python benchmarks/rollout_table.py --only P1 P2 --json out.json

Ratios are computed between rows of the same run; compare absolute numbers only across runs on the
same machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rollout_bench as rb


def best(runs: list[rb.Measurement]) -> rb.Measurement:
    """The fastest of a row's runs (the shared machine's load only slows a run down), noting how many."""
    top = max(runs, key=lambda r: r.value)
    top.detail["best_of"] = len(runs)
    return top


def run_p1(rows: list[rb.Measurement], rounds: int = 3, batches: int = 8) -> list[str]:
    """Each row's window: `batches` batches of 256 episodes (about 1.2k env steps each), the loop the same
    number of episodes; shorter windows (3 batches, 0.5 s) let a burst of load decide the ratio."""
    tok = rb.tiny_tokenizer()
    lockstep = rb.p1_lockstep_ray(tok)
    runs: dict[str, list[rb.Measurement]] = {
        k: [] for k in ("loop", "ray", "local", "ray_pool", "local_pool", "ray_64")
    }
    for _ in range(rounds):  # interleaved, so a burst of load on the shared cores hits every row alike
        runs["loop"].append(rb.p1_in_process_loop(tok, rounds=batches))
        runs["ray"].append(rb.p1_roll(tok, batches=batches, use_ray=True))
        runs["local"].append(rb.p1_roll(tok, batches=batches, use_ray=False))
        runs["ray_pool"].append(rb.p1_roll(tok, batches=batches, use_ray=True, inline_s=0.0))
        runs["local_pool"].append(rb.p1_roll(tok, batches=batches, use_ray=False, inline_s=0.0))
        # the old default layout, 4 workers of 64 envs
        runs["ray_64"].append(rb.p1_roll(tok, batches=batches, use_ray=True, per_worker=64))
    best_of = {k: best(v) for k, v in runs.items()}
    loop, ray_roll, local_roll = best_of["loop"], best_of["ray"], best_of["local"]
    rows += [
        ray_roll,
        best_of["ray_64"],
        local_roll,
        best_of["ray_pool"],
        best_of["local_pool"],
        lockstep,
        loop,
    ]
    return [
        f"P1: roll (Ray) / lockstep = {ray_roll.value / lockstep.value:.1f}x (target >= 10x); "
        f"roll (Ray) / in-process loop = {ray_roll.value / loop.value:.0%} (target >= 50%); "
        f"roll (in-process) / loop = {local_roll.value / loop.value:.0%} (target >= 50%); every env call in the "
        f"pool (inline_env_call_s=0): Ray {best_of['ray_pool'].value / loop.value:.0%}, in-process "
        f"{best_of['local_pool'].value / loop.value:.0%}; Ray with 64 envs per worker "
        f"{best_of['ray_64'].value / loop.value:.0%}"
    ]


def run_p2(rows: list[rb.Measurement]) -> list[str]:
    tok = rb.tiny_tokenizer()
    lockstep = rb.p2_lockstep(tok)
    roll = rb.p2_roll(tok)  # 64 groups of 8 + 1 redundant slot each, synchronous
    plain = rb.p2_roll(tok, redundancy=0)
    overprovisioned = rb.p2_roll(tok, overprovision=1.25, redundancy=0, ratio=1)
    light = rb.ServerModel(sigma=1.0)
    lockstep_light, roll_light = rb.p2_lockstep(tok, server_model=light), rb.p2_roll(tok, server_model=light)
    rows += [roll, plain, overprovisioned, lockstep, roll_light, lockstep_light]

    def speedup(a: rb.Measurement, b: rb.Measurement) -> str:
        return (
            f"{a.value / b.value:.2f}x (per unit of work {a.detail['of_bound'] / b.detail['of_bound']:.2f}x)"
        )

    return [
        f"P2 (sigma 1.5): lockstep / roll = {speedup(lockstep, roll)} (target >= 2.5x); roll = "
        f"{roll.detail['of_bound']:.2f}x its ideal bound (target within 1.10x)",
        f"P2 (sigma 1.0): lockstep / roll = {speedup(lockstep_light, roll_light)}; roll = "
        f"{roll_light.detail['of_bound']:.2f}x its bound",
    ]


def run_p3(rows: list[rb.Measurement]) -> list[str]:
    sync = rb.p3_pipeline(0)
    asynchronous = rb.p3_pipeline(1)
    rows += [sync, asynchronous]
    return [f"P3: step time sync / async(r=1) = {sync.value / asynchronous.value:.2f}x (target >= 1.8x)"]


def run_p5(rows: list[rb.Measurement]) -> list[str]:
    one = rb.p5_generation(1, min_turns=64)
    many = rb.p5_generation(64)
    rows += [many, one]
    return [
        f"P5: 64 concurrent envs / one at a time = {many.value / one.value:.1f}x tokens/s (target >= 10x)"
    ]


SUITES = {"P1": run_p1, "P2": run_p2, "P3": run_p3, "P5": run_p5}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=sorted(SUITES), default=sorted(SUITES))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    rows: list[rb.Measurement] = []
    notes: list[str] = []
    for name in args.only:
        print(f"[bench] running {name} ...", flush=True)
        notes += SUITES[name](rows)
    print(
        f"\nroll rollout benchmarks, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}\n"
    )
    print("| benchmark | value | unit | detail |\n|---|---|---|---|")
    for r in rows:
        detail = ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.detail.items()
        )
        print(f"| {r.name} | {r.value:.3g} | {r.unit} | {detail} |")
    print()
    for note in notes:
        print(note)
    if args.json:
        args.json.write_text(rb.as_json(rows), encoding="utf-8")


if __name__ == "__main__":
    main()
