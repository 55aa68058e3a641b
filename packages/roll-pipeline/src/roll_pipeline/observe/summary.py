"""`RunSummary`: what a run reached, as `AgenticPipeline.run()` returns it and `report.py` prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RunSummary"]


@dataclass
class RunSummary:
    """What a run reached."""

    run_dir: Path
    steps: int
    wall_time_s: float
    val_history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    last_checkpoint: Path | None = None

    def val_success(self, index: int) -> float:
        """Mean validation success over tags at the `index`-th validation (-1: last)."""
        metrics = self.val_history[index][1]
        values = [v for k, v in metrics.items() if k.startswith("val/env/") and k.endswith("/success")]
        return sum(values) / max(len(values), 1)
