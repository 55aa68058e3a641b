"""Seed-sweep results: each run's greedy validation curve from `metrics.jsonl`, the table, `sweep.json`.

Nothing here trains (`sweep_runner` launches the runs); these functions read run folders, so they serve
`roll sweep` after its runs and `roll sweep --report` on runs made elsewhere (a cluster).

**The training clock.** `metrics.jsonl` has no timestamps; every logged step has its duration
(`time/step_total`: rollout, update, weight sync) and every validation its own (`time/step_val`). The clock
at step s is the sum of both over steps 0..s, so it leaves out process start-up, model loading and
checkpoint writes, and it does not count steps lost to a crash before a resume. With `logging_steps` > 1 an
unlogged step is counted at the duration of the next logged one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from roll_pipeline.observe.metrics import mean as mean_of

THRESHOLDS = (0.5, 0.8)
"""Greedy validation success levels whose first crossing the table reports (in steps and minutes)."""

STATUS_FILE = "sweep_status.json"
"""Written into a run folder by `roll sweep` after each attempt: exit code, wall time, error."""

LOG_FILE = "train.log"
"""A seed's `roll train` output, in its run folder (appended per attempt)."""

Status = Literal["done", "reused", "failed", "unfinished", "missing"]
"""A seed's state: `reused` is `done` by an earlier `roll sweep` invocation."""

CLOCK = "training clock: summed step + validation times of metrics.jsonl (no start-up, no checkpoint writes)"


@dataclass(frozen=True)
class CurvePoint:
    """One validation: the step, greedy success (mean over the validation tags), training-clock minutes."""

    step: int
    success: float
    minutes: float


@dataclass(frozen=True)
class Crossing:
    """Where a curve first reached a success level."""

    step: int
    minutes: float


@dataclass
class SeedResult:
    """One seed's run as found on disk (and as its last `roll sweep` attempt left it)."""

    seed: int | None
    run_dir: Path
    status: Status
    last_step: int | None = None
    max_steps: int | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    train_minutes: float | None = None  # the training clock at the last logged step
    wall_minutes: float | None = None  # the `roll train` processes' wall time, when `roll sweep` ran them
    exit_code: int | None = None
    error: str | None = None

    @property
    def final(self) -> CurvePoint | None:
        """The last validation."""
        return self.curve[-1] if self.curve else None

    @property
    def best(self) -> CurvePoint | None:
        """The best validation (the earliest of equal ones)."""
        return max(self.curve, key=lambda p: (p.success, -p.step)) if self.curve else None

    def crossing(self, level: float) -> Crossing | None:
        """The first validation at or above `level`, or None."""
        return first_crossing(self.curve, level)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a `metrics.jsonl`; a torn last line (a run killed mid-write) is skipped."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if isinstance(r, dict) and "step" in r]


def current_timeline(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step, as the run's latest attempt left them: a resume restarts logging at its
    checkpoint's step, so a row for step s drops every earlier-written row of step s or later."""
    kept: list[dict[str, Any]] = []
    for row in rows:
        step = int(row["step"])
        while kept and int(kept[-1]["step"]) >= step:
            kept.pop()
        kept.append(row)
    return kept


def training_clock(rows: Sequence[dict[str, Any]]) -> list[float]:
    """Seconds of training up to the end of each row's step (rows of `current_timeline`), per row."""
    clock, total, previous = [], 0.0, 0
    for row in rows:
        step = int(row["step"])
        total += float(row.get("time/step_total", 0.0)) * max(step - previous, 0)
        total += float(row.get("time/step_val", 0.0))
        clock.append(total)
        previous = step
    return clock


def val_success(row: dict[str, Any]) -> float | None:
    """Mean of the row's `val/env/<tag>/success` values, or None when the row has no validation."""
    values = [float(v) for k, v in row.items() if k.startswith("val/env/") and k.endswith("/success")]
    return sum(values) / len(values) if values else None


def validation_curve(rows: Sequence[dict[str, Any]]) -> tuple[list[CurvePoint], float]:
    """The validation points of a run's rows and the training clock (minutes) at its last row."""
    timeline = current_timeline(rows)
    clock = training_clock(timeline)
    curve = []
    for row, seconds in zip(timeline, clock, strict=True):
        success = val_success(row)
        if success is not None:
            curve.append(CurvePoint(int(row["step"]), success, seconds / 60))
    return curve, (clock[-1] / 60 if clock else 0.0)


def first_crossing(curve: Sequence[CurvePoint], level: float) -> Crossing | None:
    """The first point of `curve` at or above `level`."""
    return next((Crossing(p.step, p.minutes) for p in curve if p.success >= level), None)


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run folder's `sweep_status.json` (`{}` when `roll sweep` never ran it)."""
    path = run_dir / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run folder's `config.json` as written by the run (`{}` when absent or unreadable)."""
    try:
        data = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def last_logged_step(run_dir: Path) -> int | None:
    """The highest step of the run's current timeline, or None when it logged nothing."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    timeline = current_timeline(read_rows(path))
    return int(timeline[-1]["step"]) if timeline else None


def read_seed(run_dir: Path, seed: int | None = None, max_steps: int | None = None) -> SeedResult:
    """A run folder's result; `max_steps` (default: its config.json's) decides whether it finished.

    Status: `failed` when the last `roll sweep` attempt exited non-zero, else `done` when the run reached
    `max_steps`, `unfinished` when it logged less, `missing` when it logged nothing."""
    config, status = read_config(run_dir), read_status(run_dir)
    seed = seed if seed is not None else config.get("seed", status.get("seed"))
    max_steps = max_steps if max_steps is not None else config.get("max_steps")
    attempts = status.get("attempts", [])
    last = attempts[-1] if attempts else {}
    result = SeedResult(seed, run_dir, "missing", max_steps=max_steps)
    if attempts:
        result.wall_minutes = sum(float(a.get("wall_time_s", 0.0)) for a in attempts) / 60
        result.exit_code, result.error = last.get("exit_code"), last.get("error")
    path = run_dir / "metrics.jsonl"
    if path.exists():
        rows = read_rows(path)
        if rows:
            result.curve, result.train_minutes = validation_curve(rows)
            result.last_step = int(current_timeline(rows)[-1]["step"])
    if result.exit_code not in (None, 0):
        result.status = "failed"
    elif result.last_step is not None:
        finished = max_steps is not None and result.last_step >= max_steps
        result.status = "done" if finished else "unfinished"
    return result


# ----------------------------------------------------------------------------- the table


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _status_text(result: SeedResult, width: int = 100) -> str:
    if result.status == "failed":
        text = f"failed (exit {result.exit_code}): {result.error or 'no error message'}"
        return text if len(text) <= width else text[: width - 1] + "…"
    if result.status == "unfinished":
        return f"unfinished (step {result.last_step}/{result.max_steps})"
    return result.status


def run_labels(results: Sequence[SeedResult]) -> list[str]:
    """Each run's name in the table and the plot: its seed, with its run folder's name when the seed alone
    does not tell the runs apart (a report comparing configs on one seed) or is unknown."""
    seeds = [r.seed for r in results]
    return [
        r.run_dir.name
        if r.seed is None
        else f"{r.seed} ({r.run_dir.name})"
        if seeds.count(r.seed) > 1
        else str(r.seed)
        for r in results
    ]


def table_rows(results: Sequence[SeedResult]) -> list[list[str]]:
    """One row of cells per seed (see `TABLE_HEADER`)."""
    rows = []
    for r, label in zip(results, run_labels(results), strict=True):
        best = r.best
        cells = [
            label,
            f"{r.last_step}/{r.max_steps}" if r.last_step is not None else "-",
            _num(r.final.success if r.final else None),
            f"{best.success:.3f} @{best.step}" if best else "-",
        ]
        for level in THRESHOLDS:
            hit = r.crossing(level)
            cells += [str(hit.step) if hit else "-", _num(hit.minutes if hit else None, ".1f")]
        cells += [_num(r.train_minutes, ".1f"), _num(r.wall_minutes, ".1f"), _status_text(r)]
        rows.append(cells)
    return rows


TABLE_HEADER = [
    "seed",
    "steps",
    "final",
    "best @step",
    *[f"{kind}→{level}" for level in THRESHOLDS for kind in ("step", "min")],
    "train min",
    "wall min",
    "status",
]
"""Columns of the table: greedy validation success; `min→x` on the training clock (`CLOCK`); `wall min`: the
`roll train` processes' wall time (start-up included) when `roll sweep` ran them."""


def summary_rows(results: Sequence[SeedResult]) -> list[list[str]]:
    """`mean` and `worst` rows over the seeds with a curve: worst = lowest success, latest crossing
    (`never` when some seed did not reach the level)."""
    curved = [r for r in results if r.curve]
    if not curved:
        return []
    finals = [r.final.success for r in curved if r.final]
    bests = [r.best.success for r in curved if r.best]
    mean = ["mean", "", _num(mean_of(finals, None)), _num(mean_of(bests, None))]
    worst = ["worst", "", _num(min(finals)), _num(min(bests))]
    for level in THRESHOLDS:
        hits = [r.crossing(level) for r in curved]
        reached = [h for h in hits if h is not None]
        tag = f" ({len(reached)}/{len(curved)})"
        mean += [
            _num(mean_of([h.step for h in reached], None), ".0f") + tag if reached else f"-{tag}",
            _num(mean_of([h.minutes for h in reached], None), ".1f") if reached else "-",
        ]
        all_reached = len(reached) == len(curved)
        worst += [
            str(max(h.step for h in reached)) if all_reached else "never",
            _num(max(h.minutes for h in reached), ".1f") if all_reached else "never",
        ]
    trains = [r.train_minutes for r in curved if r.train_minutes is not None]
    walls = [r.wall_minutes for r in curved if r.wall_minutes is not None]
    mean += [_num(mean_of(trains, None), ".1f"), _num(mean_of(walls, None), ".1f"), ""]
    worst += [_num(max(trains, default=None), ".1f"), _num(max(walls, default=None), ".1f"), ""]
    return [mean, worst]


def format_table(results: Sequence[SeedResult], markdown: bool = False) -> str:
    """The sweep table (per seed, then mean and worst), aligned text or a Markdown table."""
    rows = [TABLE_HEADER, *table_rows(results), *summary_rows(results)]
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in rows]
        lines.insert(1, "|" + "---|" * len(TABLE_HEADER))
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in rows
    )


def result_json(result: SeedResult) -> dict[str, Any]:
    """A seed's entry of `sweep.json`."""
    best = result.best
    return {
        "seed": result.seed,
        "run_dir": str(result.run_dir),
        "status": result.status,
        "exit_code": result.exit_code,
        "error": result.error,
        "last_step": result.last_step,
        "max_steps": result.max_steps,
        "final_success": result.final.success if result.final else None,
        "best_success": best.success if best else None,
        "best_step": best.step if best else None,
        "thresholds": {
            str(level): (
                {"step": hit.step, "minutes": hit.minutes} if (hit := result.crossing(level)) else None
            )
            for level in THRESHOLDS
        },
        "train_minutes": result.train_minutes,
        "wall_minutes": result.wall_minutes,
        "curve": [[p.step, p.success, p.minutes] for p in result.curve],
    }


def write_report(results: Sequence[SeedResult], out_dir: Path, meta: dict[str, Any]) -> tuple[Path, Path]:
    """`sweep.json` (every seed with its curve, plus `meta`: command, config) and `sweep.md` (the table)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {**meta, "clock": CLOCK, "thresholds": list(THRESHOLDS), "runs": [result_json(r) for r in results]}
    json_path = out_dir / "sweep.json"
    json_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    md_path = out_dir / "sweep.md"
    note = f"Greedy validation success; `min→x`: {CLOCK}; `wall min`: the `roll train` processes."
    md_path.write_text(format_table(results, markdown=True) + "\n\n" + note + "\n", encoding="utf-8")
    return json_path, md_path


def seed_line(result: SeedResult) -> str:
    """The one-line result of a seed, as `roll sweep` prints it when the seed ends."""
    head = f"seed {result.seed} {result.status}"
    if result.status == "failed":
        head += f" (exit {result.exit_code})"
    elif result.status == "unfinished":
        head += f" at step {result.last_step}/{result.max_steps}"
    if result.wall_minutes is not None:
        head += f" after {result.wall_minutes:.1f} min"
    if result.status == "failed" or not result.curve:
        return head + f": {result.error or 'no validation logged'}; log: {result.run_dir / LOG_FILE}"
    final, best = result.final, result.best
    assert final is not None and best is not None
    parts = [f"final {final.success:.3f} @{final.step}", f"best {best.success:.3f} @{best.step}"]
    for level in THRESHOLDS:
        hit = result.crossing(level)
        parts.append(f"{level} at step {hit.step} ({hit.minutes:.1f} min)" if hit else f"{level} not reached")
    return head + ": " + ", ".join(parts)


def is_run_dir(path: Path) -> bool:
    """A folder a run (or a `roll sweep` attempt) wrote into."""
    return any((path / name).exists() for name in ("metrics.jsonl", "config.json", STATUS_FILE))


def report_run_dirs(paths: Sequence[Path]) -> list[Path]:
    """The run folders behind `roll sweep --report` arguments: a run folder; a sweep folder (the runs its
    `sweep.json` lists); a folder of run folders (without the `<name>.old-<n>` ones `--force` moved aside).
    A path that does not exist stays (a missing seed)."""
    found: list[Path] = []
    for path in paths:
        if (path / "sweep.json").exists():
            data = json.loads((path / "sweep.json").read_text(encoding="utf-8"))
            found += [Path(run["run_dir"]) for run in data.get("runs", [])]
        elif is_run_dir(path) or not path.exists():
            found.append(path)
        else:
            children = sorted(
                p for p in path.iterdir() if p.is_dir() and is_run_dir(p) and ".old-" not in p.name
            )
            if not children:
                raise FileNotFoundError(
                    f"{path} is no run folder (no metrics.jsonl / config.json), no sweep folder (no "
                    "sweep.json) and holds no run folders: pass runs/<exp_name>_seed<k> folders"
                )
            found += children
    return list(dict.fromkeys(found))
