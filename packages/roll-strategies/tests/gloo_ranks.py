"""Runs a rank script of these tests (`dp_ranks.py`, `prefix_ranks.py`) as one gloo group of processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from roll_strategies import free_port


def run_ranks(
    script: str, world: int, model_dir: Path, out: Path, modes: Sequence[str]
) -> list[dict[str, Any]]:
    """Start `python script RANK WORLD PORT MODEL_DIR OUT_FILE MODE...` for every rank, wait for all of them (a
    failed rank fails with its log) and load the results each saved to `out / f"{rank}.pt"`."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                script,
                str(r),
                str(world),
                str(port),
                str(model_dir),
                str(out / f"{r}.pt"),
                *modes,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    return [torch.load(out / f"{r}.pt", weights_only=False) for r in range(world)]
