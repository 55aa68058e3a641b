"""A `roll train` of 3 steps whose FrozenLake steps raise 5% and hang 1% of the time, against the same run
without faults (docs/benchmarks.md, "Faulty env steps"); each run in a fresh process, one after another.

The run is `roll train`'s own config (the tiny model, 16 groups of 8 FrozenLake episodes of up to 8 turns
a step) with `max_steps=3`, the local backend, `env_step_timeout_s=60` and `env_step_backup_after_s=2` (the
defaults; a FrozenLake step takes microseconds); `--small` takes the end-to-end tests' small run instead (tests/small_runs.py). Its env type
is `faulty_frozen_lake` (`roll_rollout.testing.faulty_registry_env`: FrozenLake in a `FaultyEnv`, whose
hangs never end), which does not declare `owns_random_state`: its envs are isolated, each in a process of
its own. Runs: `clean` (`p_raise=0, p_hang=0`), `faulty` (5% / 1%), `faulty_in_process` (5% / 1%, the
isolated envs in the worker's process behind the random-state lock: `EnvCallLimits(env_processes=False)`),
`clean_subclass` and `faulty_subclass` (0 and 5% / 1%, env type `faulty_lake`: `roll_rollout.testing.FaultyFrozenLake`, a FrozenLake
subclass whose own `step` injects the faults; it inherits `never_blocks` and `owns_random_state`, which do not
hold for it, `roll_envs.hints`: before they were read that way, its first hang froze the worker for good).

    uv run python benchmarks/faulty_env_train.py --runs clean faulty faulty_in_process [--timeout-s S]
    uv run python benchmarks/faulty_env_train.py --backup-after-s 0   # no backup episodes
    uv run python benchmarks/faulty_env_train.py --redundancy 1   # one straggler slot per group
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import roll_envs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from small_runs import FEW_WORKERS, SMALL_FROZEN_LAKE, steps

roll_envs.register("faulty_frozen_lake", "roll_rollout.testing:faulty_registry_env")
roll_envs.register("faulty_lake", "roll_rollout.testing:FaultyFrozenLake")

RUNS = {
    "clean": ("faulty_frozen_lake", 0.0, 0.0, True),
    "faulty": ("faulty_frozen_lake", 0.05, 0.01, True),
    "faulty_in_process": ("faulty_frozen_lake", 0.05, 0.01, False),
    "clean_subclass": ("faulty_lake", 0.0, 0.0, True),
    "faulty_subclass": ("faulty_lake", 0.05, 0.01, True),
}
"""name -> (env type, p_raise, p_hang, env processes)."""
SMALL = [*SMALL_FROZEN_LAKE, *FEW_WORKERS]
"""The end-to-end tests' small run (tests/small_runs.py); without --small, `roll train`'s own config."""


def run(
    name: str, out: Path, small: bool, timeout_s: float, redundancy: int = 0, backup_after_s: float = 2.0
) -> dict[str, Any]:
    """One 3-step run in this process: its wall time and the rollout's fault counts."""
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.config.compose import compose

    env_type, p_raise, p_hang, processes = RUNS[name]
    if not processes:
        in_process_limits()
    overrides = [
        *steps(3),
        *(SMALL if small else []),
        "cluster.backend=local",
        f"output_dir={out}",
        f"exp_name={name}",
        f"custom_envs.FrozenLake.env_type={env_type}",
        f"+custom_envs.FrozenLake.env_config.p_raise={p_raise}",
        f"+custom_envs.FrozenLake.env_config.p_hang={p_hang}",
        f"train_env_manager.env_step_timeout_s={timeout_s}",
        f"val_env_manager.env_step_timeout_s={timeout_s}",
        f"train_env_manager.group_size_redundancy={redundancy}",
        f"train_env_manager.env_step_backup_after_s={backup_after_s}",
        f"val_env_manager.env_step_backup_after_s={backup_after_s}",
    ]
    cfg = compose(None, None, overrides)
    started = time.monotonic()
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        pipeline.run()
    finally:
        pipeline.close()
    seconds = time.monotonic() - started
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    counts = {
        key: int(sum(r.get(f"rollout/{key}", 0) for r in rows))
        for key in (
            "env_errors",
            "env_timeouts",
            "env_worker_recycles",
            "backup_episodes",
            "backup_replicas_raced",
            "backup_replicas_unraced",
        )
    }
    return {"run": name, "seconds": round(seconds, 1), **counts}


def in_process_limits() -> None:
    """The pipeline's env workers get `env_processes=False` (the isolated envs stay behind the lock)."""
    from roll_pipeline.runtime import rollout
    from roll_rollout.hosting.worker import EnvCallLimits

    def limits(*args: Any, **kwargs: Any) -> EnvCallLimits:
        return dataclasses.replace(EnvCallLimits(*args, **kwargs), env_processes=False)

    rollout.EnvCallLimits = limits  # type: ignore[attr-defined,assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["clean", "faulty"], choices=sorted(RUNS))
    parser.add_argument("--small", action="store_true", help="the end-to-end tests' small run")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="env_step_timeout_s (the default's)")
    parser.add_argument(
        "--backup-after-s", type=float, default=2.0, help="env_step_backup_after_s (the default's; 0: off)"
    )
    parser.add_argument("--redundancy", type=int, default=0, help="train_env_manager.group_size_redundancy")
    parser.add_argument("--limit-s", type=float, default=1800.0, help="wall time allowed to one run")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a run in a child process, its JSON row out
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            row = run(args.one, Path(tmp), args.small, args.timeout_s, args.redundancy, args.backup_after_s)
            print(json.dumps(row))
        return
    rows = []
    for name in args.runs:  # each in a fresh process: hung threads of one run must not slow the next
        command = [sys.executable, __file__, "--one", name, "--timeout-s", str(args.timeout_s)]
        command += ["--redundancy", str(args.redundancy), "--backup-after-s", str(args.backup_after_s)]
        command += ["--small"] if args.small else []
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.limit_s, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except subprocess.TimeoutExpired:
            rows.append({"run": name, "seconds": f">{args.limit_s:g}"})
        except subprocess.CalledProcessError as exc:
            rows.append({"run": name, "failed": exc.stderr[-2000:]})
        print(json.dumps({**rows[-1], "wall_s": round(time.monotonic() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
