"""Shared prefixes against the dense path: `roll train` steps with `share_prefix` true and false, side by side.

Each case runs the real pipeline in this process (cluster.backend=local) for a few steps with validation and
checkpoints pushed past the end, once dense and once shared, and reports the mean of its steps after the first
(the first warms caches): the step time split (rollout = generation, reference log-probs, old log-prob
recompute, actor update), the process's peak RSS, and train tokens/s counting every trained token (dense
throughput) and counting each micro-batch's distinct tokens only. The same run measures this machine's float32
and bfloat16 matrix-multiply rate (2048^3, the process's threads), and reports the update's model FLOPs
(6 x parameters x the tokens computed) as a fraction of the float32 rate.

Cases:
- `four_choice`: the SmolLM2-135M four_choice recipe (examples/smollm2-cpu-agentic/agent_four_choice.yaml);
- `frozen_lake`: SmolLM2-135M on FrozenLake, 6 turns, 2 turns of history, step-wise samples, 2 groups of 8
  (examples/smollm2-cpu-agentic/agent_val_frozen_lake.yaml with those overrides);
- `frozen_lake_history`: the same with the whole episode as history (`max_history_turns=null`): each turn's
  prompt extends the last one, so its sample repeats the episode so far and its generation can reuse the last
  turn's cache;
- `default`: the default `roll train` (the tiny model, FrozenLake).

    uv run python tools/convert_gguf.py --fetch-smollm2        # once, for the SmolLM2 cases
    uv run python benchmarks/shared_prefix_table.py            # all cases (about 80 min on 2 cores)
    uv run python benchmarks/shared_prefix_table.py --cases default --steps 12
    uv run python benchmarks/shared_prefix_table.py --cases four_choice \
        --set actor_train.training_args.per_device_train_batch_size=8   # the recipe at another micro-batch
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NO_EVAL = ["eval_steps=100000", "save_steps=100000", "print_baselines=false"]


@dataclass(frozen=True)
class Case:
    name: str
    config_path: str | None
    config_name: str | None
    overrides: tuple[str, ...]
    steps: int


CASES = {
    "four_choice": Case("four_choice", "smollm2-cpu-agentic", "agent_four_choice", (), 3),
    "frozen_lake": Case(
        "frozen_lake",
        "smollm2-cpu-agentic",
        "agent_val_frozen_lake",
        (
            "custom_envs.FrozenLake.max_actions_per_traj=6",
            "custom_envs.FrozenLake.max_history_turns=2",
            "sample_shape=step",
            "train_env_manager.num_env_groups=2",
            "train_env_manager.group_size=8",
        ),
        2,
    ),
    "frozen_lake_history": Case(
        "frozen_lake_history",
        "smollm2-cpu-agentic",
        "agent_val_frozen_lake",
        (
            "custom_envs.FrozenLake.max_actions_per_traj=6",
            "custom_envs.FrozenLake.max_history_turns=null",
            "sample_shape=step",
            "train_env_manager.num_env_groups=2",
            "train_env_manager.group_size=8",
        ),
        2,
    ),
    "default": Case("default", None, None, (), 12),
}

TOKENS_PER_S = "actor/train_tokens_per_s"
MEASURED_S = 0.01
"""Phases shorter than this (seconds) get no dense / shared ratio."""
DISTINCT = "actor/distinct_token_fraction"
PHASES = {
    "rollout": "time/step_rollout",
    "reference": "time/step_ref_log_probs",
    "recompute": "time/step_old_log_probs",
    "update": "time/step_train",
    "step": "time/step_total",
}


@dataclass
class Result:
    case: str
    share_prefix: bool
    phases: dict[str, float] = field(default_factory=dict)
    tokens: float = 0.0
    """The update's train tokens/s, counting every trained token."""
    peak_rss_gb: float = 0.0
    distinct_fraction: float = 1.0
    """The tokens the update's forwards compute over all its tokens (prefix-tree nodes; 1 for dense)."""


def matmul_rate(dtype: torch.dtype, size: int = 2048, repeats: int = 3) -> float:
    """GFLOP/s of a size^3 matrix multiply in `dtype` (best of `repeats`)."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_case(case: Case, share: bool, steps: int, extra: list[str]) -> Result:
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.preflight import compose

    with tempfile.TemporaryDirectory() as out:
        overrides = [
            *case.overrides,
            *extra,
            *NO_EVAL,
            f"max_steps={steps}",
            f"share_prefix={str(share).lower()}",
            f"output_dir={out}",
            "track_with=[]",
        ]
        config = compose(case.config_path, case.config_name, overrides, search_from=ROOT / "examples")
        pipeline = AgenticPipeline(config, progress=False)
        try:
            pipeline.run()
        finally:
            pipeline.close()
        metrics_file = next(Path(out).rglob("metrics.jsonl"))
        rows = [json.loads(line) for line in metrics_file.open()]
    timed = [r for r in rows if "time/step_total" in r][1:] or [r for r in rows if "time/step_total" in r]
    result = Result(case.name, share)
    for phase, key in PHASES.items():
        result.phases[phase] = sum(float(r.get(key, 0.0)) for r in timed) / len(timed)
    result.tokens = sum(float(r.get(TOKENS_PER_S, 0.0)) for r in timed) / len(timed)
    result.distinct_fraction = sum(float(r.get(DISTINCT, 1.0)) for r in timed) / len(timed)
    result.peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return result


def _in_child(name: str, share: bool, steps: int | None, extra: list[str]) -> Result:
    """One run in a process of its own: its peak RSS is its own and nothing carries over between runs."""
    command = [sys.executable, __file__, "--one", f"{name}:{str(share).lower()}"]
    if steps:
        command += ["--steps", str(steps)]
    command += [f"--set={override}" for override in extra]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    return Result(**json.loads(done.stdout.strip().splitlines()[-1]))


SMOLLM2 = 134_515_008
PARAMETERS = {
    "four_choice": SMOLLM2,
    "frozen_lake": SMOLLM2,
    "frozen_lake_history": SMOLLM2,
    "default": 398_464,
}


def _flop_share(result: Result, fp32_gflops: float) -> float:
    """The update's model FLOPs per second (6 x parameters x distinct tokens computed per second) over the
    float32 matmul rate."""
    computed = result.tokens * result.distinct_fraction
    return 6 * PARAMETERS[result.case] * computed / 1e9 / fp32_gflops


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: the case's)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every run (repeatable), e.g. a case's micro-batch size",
    )
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # CASE:true|false, in a child process
    args = parser.parse_args()
    if args.one:
        name, share = args.one.split(":")
        case = CASES[name]
        print(json.dumps(run_case(case, share == "true", args.steps or case.steps, args.set).__dict__))
        return
    fp32, bf16 = matmul_rate(torch.float32), matmul_rate(torch.bfloat16)
    print(
        f"{datetime.date.today()} {platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}; matmul 2048^3: float32 {fp32:.1f} GFLOP/s, bfloat16 {bf16:.1f} GFLOP/s"
    )
    results: list[Result] = []
    for name in args.cases:
        case = CASES[name]
        for share in (False, True):
            results.append(_in_child(name, share, args.steps, args.set))
            print(json.dumps(results[-1].__dict__), flush=True)
    print(
        "| case | share_prefix | step (s) | rollout | reference | recompute | update | train tokens/s (all) |"
        " train tokens/s (distinct) | update / float32 matmul rate | peak RSS (GB) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        p = r.phases
        print(
            f"| {r.case} | {str(r.share_prefix).lower()} | {p['step']:.1f} | {p['rollout']:.1f} | "
            f"{p['reference']:.1f} | {p['recompute']:.1f} | {p['update']:.1f} | {r.tokens:,.0f} | "
            f"{r.tokens * r.distinct_fraction:,.0f} | {_flop_share(r, fp32):.2f} | {r.peak_rss_gb:.1f} |"
        )
    for name in args.cases:
        dense, shared = (
            next(r for r in results if r.case == name and r.share_prefix is s) for s in (False, True)
        )
        # a phase the case skips (recompute, where the sampler's log-probs are used) times a few microseconds
        ratios = {k: dense.phases[k] / shared.phases[k] for k in PHASES if shared.phases[k] >= MEASURED_S}
        print(f"{name}: dense / shared " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    main()
