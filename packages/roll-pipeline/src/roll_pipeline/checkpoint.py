"""Checkpoints that survive a crash mid-write.

`run_dir/checkpoints/checkpoint-{step}/` holds `model/` (the train strategy's files: weights,
tokenizer, optimiser state) and `pipeline_state.json` (step, seed stream). A checkpoint is written
into a `.tmp` folder and renamed into place only when complete, so a crash leaves at worst a stray
`.tmp` folder, never a half checkpoint under a valid name; `latest` names the newest complete one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


class CheckpointError(Exception):
    """A checkpoint folder is missing or incomplete."""


class CheckpointManager:
    """Writes and finds checkpoints under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def model_dir(checkpoint: Path) -> Path:
        """Where a checkpoint keeps the model files."""
        return Path(checkpoint) / "model"

    async def save(
        self, step: int, state: dict[str, Any], save_model: Callable[[Path], Awaitable[Any]]
    ) -> Path:
        """Write checkpoint `step` atomically; `save_model(path)` writes the model files into `path`."""
        final = self.root / f"checkpoint-{step}"
        tmp = self.root / f"checkpoint-{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        await save_model(self.model_dir(tmp))
        (tmp / "pipeline_state.json").write_text(json.dumps(state), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (self.root / "latest").write_text(final.name, encoding="utf-8")
        return final

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        marker = self.root / "latest"
        if not marker.exists():
            return None
        path = self.root / marker.read_text(encoding="utf-8").strip()
        return path if (path / "pipeline_state.json").exists() else None

    @staticmethod
    def load_state(checkpoint: Path) -> dict[str, Any]:
        """Read a checkpoint's pipeline state, checking the folder is complete."""
        checkpoint = Path(checkpoint)
        state_file = checkpoint / "pipeline_state.json"
        if not state_file.exists() or not CheckpointManager.model_dir(checkpoint).exists():
            raise CheckpointError(
                f"{checkpoint} is not a complete checkpoint (expected pipeline_state.json and model/); "
                "pass a checkpoint-N folder from a run's checkpoints/ directory"
            )
        return json.loads(state_file.read_text(encoding="utf-8"))
