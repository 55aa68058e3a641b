"""`RunSummary`: what a run reached, as `AgenticPipeline.run()` returns it and `report.py` prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUBSET_PREFIX", "RunSummary"]

SUBSET_PREFIX = "val/subset/env/"
"""Where the validation at max_steps of a run with val_subset_size logs the subset's success."""


@dataclass
class RunSummary:
    """What a run reached."""

    run_dir: Path
    steps: int
    wall_time_s: float
    val_history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    last_checkpoint: Path | None = None

    def val_success(self, index: int, prefix: str = "val/env/") -> float:
        """Mean validation success over tags at the `index`-th validation (-1: last), of its pass logged under
        `prefix` (SUBSET_PREFIX: the subset's, at the end of a run with val_subset_size)."""
        metrics = self.val_history[index][1]
        values = [v for k, v in metrics.items() if k.startswith(prefix) and k.endswith("/success")]
        return sum(values) / max(len(values), 1)

    def curve_success(self, index: int) -> float:
        """The learning curve's point at the `index`-th validation: the subset's success where that validation
        also played all (val_subset_size, at max_steps: val/subset/env/), else its one pass's (val/env/)."""
        both = any(k.startswith(SUBSET_PREFIX) for k in self.val_history[index][1])
        return self.val_success(index, SUBSET_PREFIX if both else "val/env/")
