"""Where metrics go: TensorBoard event files, a JSON-lines file, and one console line per step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

STDOUT_KEYS = (
    "env/",
    "val/env/",
    "val/score/mean",
    "critic/score/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/kl_loss",
    "time/step_total",
)


class Tracker:
    """Logs scalar metrics to `run_dir/tensorboard` (event files), `run_dir/metrics.jsonl` and stdout."""

    def __init__(self, run_dir: Path, track_with: list[str], config: dict[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.jsonl = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self.stdout = "stdout" in track_with
        self.writer = None
        if "tensorboard" in track_with:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
            if config is not None:
                self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)
        if config is not None:
            (self.run_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Write every finite scalar of `metrics` at `step`."""
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if self.writer is not None:
            for key, value in clean.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.stdout:
            shown = {
                k: v
                for k, v in clean.items()
                if k.startswith(STDOUT_KEYS) and not k.endswith(("/max", "/min"))
            }
            text = "  ".join(f"{k}={v:.3g}" for k, v in sorted(shown.items()))
            from tqdm.auto import tqdm

            tqdm.write(f"[step {step}] {text}")

    def close(self) -> None:
        """Flush and close the files."""
        self.jsonl.close()
        if self.writer is not None:
            self.writer.close()
