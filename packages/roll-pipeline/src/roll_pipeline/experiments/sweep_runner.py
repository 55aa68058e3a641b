"""`roll sweep`'s runs: one `roll train` process per seed, so a crash or an OOM kill ends only that seed.

Each seed is planned first (`plan_seed`): a run folder that already reached `max_steps` is reused, an
unfinished one resumes from its newest verified checkpoint (or, without one, is moved aside and started
afresh), and a folder holding a run of a different config is refused unless `--force` (which moves it
aside). Then the seeds run, `parallel` at a time, as local processes; a process's output goes to its run
folder's `train.log` (and, one seed at a time, to the console as well), and each attempt's exit code, wall
time and error line land in the folder's `sweep_status.json` (`sweep.STATUS_FILE`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.experiments.sweep import (
    LOG_FILE,
    STATUS_FILE,
    SeedResult,
    last_logged_step,
    read_config,
    read_seed,
    read_status,
    seed_line,
)
from roll_pipeline.state.checkpoint import newest_verified

IGNORED_CONFIG_KEYS = frozenset({"max_steps", "resume_from_checkpoint", "output_dir"})
"""Config keys in which a run folder may differ from the sweep's config and still be continued."""


class SweepError(ValueError):
    """The sweep cannot start as asked (the message says which seed and how to fix it)."""


@dataclass(frozen=True)
class SeedJob:
    """What `roll sweep` does with one seed: `action` is `reuse`, `run` or `resume` (from `checkpoint`);
    `move_aside`: the folder's old run is renamed (`<name>.old-<n>`) before this one starts."""

    seed: int
    run_dir: Path
    action: Literal["reuse", "run", "resume"]
    command: tuple[str, ...] = ()
    checkpoint: Path | None = None
    move_aside: bool = False
    note: str = ""


@dataclass(frozen=True)
class Attempt:
    """How one `roll train` process ended."""

    exit_code: int
    wall_time_s: float
    error: str | None


def parse_seeds(text: str) -> list[int]:
    """`1,2,3` or `1-3` (or a mix) -> [1, 2, 3]; duplicates are an error."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(-?\d+)(?:-(\d+))?", part)
        if match is None:
            raise SweepError(f"--seeds {text!r}: {part!r} is not a seed; write e.g. --seeds 1,2,3 or 1-3")
        low, high = int(match[1]), int(match[2] or match[1])
        seeds += range(low, high + 1)
    if len(set(seeds)) != len(seeds) or not seeds:
        raise SweepError(f"--seeds {text!r}: give each seed once, e.g. --seeds 1,2,3")
    return seeds


def config_differences(found: dict[str, Any], wanted: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dumps (`IGNORED_CONFIG_KEYS` at the top skipped)."""
    keys = sorted(set(found) | set(wanted))
    out = []
    for key in keys:
        if not prefix and key in IGNORED_CONFIG_KEYS:
            continue
        a, b = found.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def plan_seed(
    seed: int, run_dir: Path, config: dict[str, Any], train_command: Sequence[str], force: bool
) -> SeedJob:
    """Reuse, resume or (re)start the seed's run folder, given the seed's composed `config` (a JSON dump);
    `train_command` is the `roll train` command line of the seed. Changes nothing on disk; raises
    `SweepError` for a folder that holds another config's run (unless `force`)."""
    command = tuple(train_command)
    if force and run_dir.exists():
        return SeedJob(
            seed, run_dir, "run", command, move_aside=True, note="--force: the old run is moved aside"
        )
    if last_logged_step(run_dir) is None:  # nothing logged yet: a run there starts afresh anyway
        return SeedJob(seed, run_dir, "run", command)
    found = read_config(run_dir)
    differ = config_differences(found, config) if found else ["config.json (absent or unreadable)"]
    if differ:
        shown = ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6 else "")
        raise SweepError(
            f"seed {seed}: {run_dir} holds a run of another config (differs in {shown}); pass --force to "
            "move it aside and rerun, or pick another exp_name"
        )
    last, max_steps = last_logged_step(run_dir), int(config["max_steps"])
    failed = (read_status(run_dir).get("attempts") or [{}])[-1].get("exit_code") not in (None, 0)
    if last is not None and last >= max_steps and not failed:
        return SeedJob(seed, run_dir, "reuse", note=f"finished: step {last}/{max_steps}; --force reruns it")
    checkpoint = newest_verified(run_dir / "checkpoints")
    if checkpoint is not None:
        resume = (*command, f"resume_from_checkpoint={hydra_quoted(str(checkpoint))}")
        return SeedJob(
            seed, run_dir, "resume", resume, checkpoint=checkpoint, note=f"resuming from {checkpoint.name}"
        )
    note = "unfinished and without a checkpoint: the old run is moved aside"
    return SeedJob(seed, run_dir, "run", command, move_aside=True, note=note)


def hydra_quoted(value: str) -> str:
    """`value` as a Hydra override value: quoted unless plain (a path with spaces or `=` stays one string)."""
    if re.fullmatch(r"[\w./:-]+", value):
        return value
    quote = "'" if "'" not in value else '"'
    return f"{quote}{value}{quote}"


def override_key(override: str) -> str:
    """`++a.b=1` -> `a.b`."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def train_command(
    config_path: str | None, config_name: str | None, overrides: Sequence[str], progress: bool
) -> list[str]:
    """`python -m roll_pipeline.cli train ...` with this interpreter (the seed's overrides come last)."""
    command = [sys.executable, "-m", "roll_pipeline.cli", "train"]
    if config_path is not None:
        command += ["--config-path", config_path]
    if config_name is not None:
        command += ["--config-name", config_name]
    return [*command, *([] if progress else ["--no-progress"]), *overrides]


def plan_sweep(
    config: AgenticConfig,
    seeds: Sequence[int],
    *,
    config_path: str | None,
    config_name: str | None,
    overrides: Sequence[str],
    force: bool,
    progress: bool,
) -> list[SeedJob]:
    """One job per seed: run `exp_name=<exp_name>_seed<k> seed=<k>` of the composed `config` under its
    `output_dir` (see `plan_seed`). Every seed is checked before any runs; all problems in one `SweepError`."""
    problems = [
        f"override {o!r}: roll sweep sets {override_key(o)} per seed; drop it (seeds come from --seeds)"
        for o in overrides
        if override_key(o) in ("seed", "resume_from_checkpoint")
    ]
    shared = [o for o in overrides if override_key(o) != "exp_name"]
    jobs = []
    for seed in seeds:
        name = f"{config.exp_name}_seed{seed}"
        wanted = config.model_copy(update={"seed": seed, "exp_name": name}).model_dump(mode="json")
        command = train_command(
            config_path, config_name, [*shared, f"exp_name={name}", f"seed={seed}"], progress
        )
        try:
            jobs.append(plan_seed(seed, Path(config.output_dir) / name, wanted, command, force))
        except SweepError as exc:
            problems.append(str(exc))
    if problems:
        raise SweepError("\n".join([f"{len(problems)} problem(s):", *(f"  - {p}" for p in problems)]))
    return jobs


def move_aside(run_dir: Path) -> Path:
    """Rename `run_dir` to `<name>.old-<n>` (nothing is deleted)."""
    n = 1
    while (target := run_dir.with_name(f"{run_dir.name}.old-{n}")).exists():
        n += 1
    run_dir.rename(target)
    return target


def run_sweep(jobs: Sequence[SeedJob], parallel: int, max_steps: int) -> list[SeedResult]:
    """Run the planned jobs (one line per seed as it starts and ends); every seed's result, in order."""
    for job in jobs:
        if job.action == "reuse":
            print(f"[sweep] seed {job.seed}: reusing {job.run_dir} ({job.note})", flush=True)

    def started(job: SeedJob) -> None:
        what = f"resuming from {job.checkpoint.name}" if job.checkpoint else "training"
        print(f"[sweep] seed {job.seed}: {what} in {job.run_dir} (output: its {LOG_FILE})", flush=True)

    def ended(job: SeedJob, attempt: Attempt) -> None:
        print(f"[sweep] {seed_line(read_seed(job.run_dir, job.seed, max_steps))}", flush=True)

    run_jobs(jobs, parallel, started, ended)
    results = [read_seed(job.run_dir, job.seed, max_steps) for job in jobs]
    for job, result in zip(jobs, results, strict=True):
        if job.action == "reuse" and result.status == "done":
            result.status = "reused"
    return results


def run_jobs(
    jobs: Sequence[SeedJob],
    parallel: int,
    on_start: Callable[[SeedJob], None],
    on_end: Callable[[SeedJob, Attempt], None],
) -> dict[int, Attempt]:
    """Run the `run`/`resume` jobs, `parallel` at a time (one at a time: output also to the console)."""
    todo = [job for job in jobs if job.action != "reuse"]
    stream = sys.stdout if parallel <= 1 else None
    lock = threading.Lock()

    def one(job: SeedJob) -> tuple[int, Attempt]:
        with lock:
            on_start(job)
        if job.move_aside and job.run_dir.exists():
            moved = move_aside(job.run_dir)
            print(f"[sweep] seed {job.seed}: the old {job.run_dir.name} is now {moved}", flush=True)
        attempt = run_train_process(job, stream)
        record_attempt(job, attempt)
        with lock:
            on_end(job, attempt)
        return job.seed, attempt

    with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
        return dict(pool.map(one, todo))


def run_train_process(job: SeedJob, stream: TextIO | None) -> Attempt:
    """Run the job's command with its output appended to `train.log` (and copied to `stream`)."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (job.run_dir / LOG_FILE).open("ab") as log:
        log.write(f"\n=== roll sweep, seed {job.seed}: {' '.join(job.command)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            job.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_child_env()
        )
        assert proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while chunk := proc.stdout.read1(1 << 14):
            log.write(chunk)
            log.flush()
            if stream is not None:
                stream.write(decoder.decode(chunk))
                stream.flush()
        code = proc.wait()
    return Attempt(code, time.perf_counter() - started, None if code == 0 else failure_reason(job, code))


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def failure_reason(job: SeedJob, exit_code: int) -> str:
    """One line: the signal that killed the process, or the last error line of its log."""
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        return f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    text = (job.run_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    attempt = text.rsplit("=== roll sweep,", 1)[-1]
    lines = [line.strip() for line in attempt.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line)]
    last = errors[-1] if errors else (lines[-1] if lines else "no output")
    return last[:300]


def record_attempt(job: SeedJob, attempt: Attempt) -> None:
    """Append the attempt to the run folder's `sweep_status.json`."""
    status = read_status(job.run_dir)
    attempts = [*status.get("attempts", []), {"command": list(job.command), **attempt.__dict__}]
    data = {"seed": job.seed, "attempts": attempts}
    (job.run_dir / STATUS_FILE).write_text(json.dumps(data, indent=2), encoding="utf-8")
