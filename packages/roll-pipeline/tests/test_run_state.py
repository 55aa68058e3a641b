"""The pipeline state of a checkpoint: global RNGs as JSON, `resume_from_checkpoint: auto`, and the
scheduler / KL / tracker state restored on resume."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from roll_pipeline.state.checkpoint import CheckpointError, CheckpointManager
from roll_pipeline.state.run_state import global_rng_state, read_resume_state, set_global_rng_state


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_global_rngs_round_trip_through_json():
    state = json.loads(json.dumps(global_rng_state()))
    expected = _draws()
    _draws()
    set_global_rng_state(state)
    assert _draws() == expected


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: None,
        lambda s: {k: v for k, v in s.items() if k != "numpy"},
        lambda s: {**s, "torch": "not base64!"},
        lambda s: {**s, "torch": "AAAA"},  # bytes, but not a torch generator state
        lambda s: {**s, "python": [3, [1, 2], None]},
    ],
)
def test_a_malformed_rng_state_is_refused_and_changes_nothing(damage):
    state = json.loads(json.dumps(global_rng_state()))
    expected = _draws()
    set_global_rng_state(state)
    with pytest.raises(CheckpointError, match="global RNG state is malformed"):
        set_global_rng_state(damage(state))
    assert _draws() == expected


def _checkpoint(root: Path, step: int, state: dict | None = None) -> Path:
    async def save_model(path: Path) -> None:
        path.mkdir(parents=True)
        (path / "weights.bin").write_bytes(b"w")

    return asyncio.run(CheckpointManager(root).save(step, state or {"step": step}, save_model))


def test_auto_resume_takes_the_newest_checkpoint_that_verifies(tmp_path, capsys):
    manager = CheckpointManager(tmp_path)
    assert read_resume_state("auto", manager) == (None, None)  # nothing yet: a fresh start
    assert "starting afresh" in capsys.readouterr().out
    assert read_resume_state(None, manager) == (None, None)
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    assert read_resume_state("auto", manager) == (newest, {"step": 2})
    (newest / "pipeline_state.json").write_text('{"step": 3}')  # damaged after it was written
    with pytest.warns(UserWarning, match="checkpoint-2 does not verify"):
        path, state = read_resume_state("auto", manager)
    assert path == tmp_path / "checkpoint-1" and state == {"step": 1}


def test_an_explicit_older_checkpoint_warns_that_newer_ones_belong_to_the_replaced_run(tmp_path, capsys):
    first = _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    path, _ = read_resume_state(str(first), CheckpointManager(tmp_path))
    assert path == first and "checkpoint-2 is newer" in capsys.readouterr().out
    bad = _checkpoint(tmp_path, 5, {"step": "five"})
    with pytest.raises(CheckpointError, match="'step' must be an int"):
        read_resume_state(str(bad), CheckpointManager(tmp_path))
    bad = _checkpoint(tmp_path, 6, {"step": 6, "tracker": ["abc"]})
    with pytest.raises(CheckpointError, match="'tracker' must map names to run ids"):
        read_resume_state(str(bad), CheckpointManager(tmp_path))
