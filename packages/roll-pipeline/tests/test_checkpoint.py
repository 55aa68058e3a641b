"""Verified checkpoints: a manifest written last, checked on load; a damaged file is named together with
the newest earlier checkpoint that verifies, and resuming from that one works."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import torch
from roll_pipeline.state.checkpoint import (
    MANIFEST_FILE,
    CheckpointError,
    CheckpointManager,
    checkpoint_problem,
    checkpoint_step,
    newest_verified,
    verify_checkpoint,
)
from roll_strategies import HFTrainStrategy, OptimizerSettings, build_tiny_model
from roll_strategies.errors import CheckpointError as StrategyCheckpointError

DAMAGED = {
    "model weights": "model/model.safetensors",
    "optimizer state": "model/trainer_state.pt",
    "pipeline state": "pipeline_state.json",
}


def _train_step(strategy: HFTrainStrategy, seed: int) -> None:
    ids = torch.randint(8, 60, (4, 10), generator=torch.Generator().manual_seed(seed))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def loss_fn(log_probs, entropy, mb):
        return -log_probs[:, 1:].mean(), {}

    strategy.train_step([batch], loss_fn, with_entropy=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """checkpoints/ of a short run: checkpoint-1 and checkpoint-2 of a tiny model, written by the manager."""
    root = tmp_path_factory.mktemp("run")
    model = build_tiny_model(root / "init", vocab_texts=["a b c d e f g h"], hidden_size=32, num_layers=1)
    strategy = HFTrainStrategy(model, optimizer=OptimizerSettings(learning_rate=1e-2))
    manager = CheckpointManager(root / "checkpoints")

    async def save_model(path: Path) -> None:
        strategy.save_checkpoint(path)

    for step in (1, 2):
        _train_step(strategy, step)
        asyncio.run(manager.save(step, {"step": step, "train_rng": [step]}, save_model))
    return root / "checkpoints"


@pytest.fixture
def checkpoints(run, tmp_path) -> Path:
    """A fresh copy of the run's checkpoints/ that a test may damage."""
    return Path(shutil.copytree(run, tmp_path / "checkpoints"))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_the_manifest_lists_every_file_and_is_written_last(checkpoints):
    ckpt = checkpoints / "checkpoint-2"
    listed = json.loads((ckpt / MANIFEST_FILE).read_text())["files"]
    on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()} - {MANIFEST_FILE}
    assert set(listed) == on_disk and set(DAMAGED.values()) <= on_disk
    assert all(listed[name]["size"] == (ckpt / name).stat().st_size for name in listed)
    newest = max(on_disk, key=lambda n: (ckpt / n).stat().st_mtime_ns)
    assert (ckpt / MANIFEST_FILE).stat().st_mtime_ns >= (ckpt / newest).stat().st_mtime_ns
    verify_checkpoint(ckpt)
    assert CheckpointManager(checkpoints).latest() == ckpt


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_truncated_file_is_named_and_the_previous_good_checkpoint_resumes(kind, checkpoints, run):
    bad, good = checkpoints / "checkpoint-2", checkpoints / "checkpoint-1"
    truncate(bad / DAMAGED[kind])
    with pytest.raises(CheckpointError) as err:
        CheckpointManager.load_state(bad)
    message = str(err.value)
    assert DAMAGED[kind] in message and "truncated" in message
    assert f"resume_from_checkpoint={good}" in message
    with pytest.warns(UserWarning, match=r"checkpoint-2 does not verify .*falling back to .*checkpoint-1"):
        assert CheckpointManager(checkpoints).latest() == good
    # the fallback resumes: its state loads, and its weights and optimiser state restore a strategy
    assert CheckpointManager.load_state(good)["step"] == 1
    strategy = HFTrainStrategy(run.parent / "init", optimizer=OptimizerSettings(learning_rate=1e-2))
    strategy.load_checkpoint(CheckpointManager.model_dir(good))
    assert strategy.step == 1
    saved = torch.load(good / "model" / "trainer_state.pt", weights_only=True)
    assert strategy.optimizer.state_dict()["state"].keys() == saved["optimizer"]["state"].keys()


def test_a_changed_byte_of_the_same_size_fails_the_checksum(checkpoints):
    path = checkpoints / "checkpoint-2" / "model" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model/model\.safetensors does not match its sha256"):
        verify_checkpoint(checkpoints / "checkpoint-2")


def test_missing_manifest_missing_file_and_no_good_checkpoint(checkpoints):
    (checkpoints / "checkpoint-2" / MANIFEST_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"manifest\.json is missing.*checkpoint-1"):
        verify_checkpoint(checkpoints / "checkpoint-2")
    (checkpoints / "checkpoint-1" / "model" / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointError, match=r"model/trainer_state\.pt is missing\. No earlier checkpoint"):
        verify_checkpoint(checkpoints / "checkpoint-1")
    assert newest_verified(checkpoints) is None
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_checkpoint(checkpoints / "checkpoint-7")


def test_a_verified_checkpoint_is_not_hashed_again_unless_it_changes(checkpoints, monkeypatch):
    import roll_pipeline.state.checkpoint as ckpt_module

    verify_checkpoint(checkpoints / "checkpoint-1")
    hashed = []
    monkeypatch.setattr(ckpt_module, "_sha256", lambda p: hashed.append(p) or "0")
    verify_checkpoint(checkpoints / "checkpoint-1")
    assert hashed == []
    truncate(checkpoints / "checkpoint-1" / "pipeline_state.json")
    with pytest.raises(CheckpointError, match=r"pipeline_state\.json has"):
        verify_checkpoint(checkpoints / "checkpoint-1")


def test_the_train_strategy_names_a_damaged_file_even_without_a_manifest(checkpoints, run):
    model_dir = checkpoints / "checkpoint-2" / "model"
    strategy = HFTrainStrategy(run.parent / "init", optimizer=OptimizerSettings(learning_rate=1e-2))
    for name in ("model.safetensors", "trainer_state.pt"):
        shutil.copy(run / "checkpoint-2" / "model" / "model.safetensors", model_dir / "model.safetensors")
        truncate(model_dir / name)
        with pytest.raises(StrategyCheckpointError, match=rf"{name} cannot be read .*damaged or truncated"):
            strategy.load_checkpoint(model_dir)


def _save(manager: CheckpointManager, step: int, fail: bool = False) -> None:
    async def save_model(path: Path) -> None:
        path.mkdir(parents=True)
        (path / "weights.bin").write_bytes(bytes([step]) * 64)
        if fail:  # a crash in the middle of writing the model
            raise RuntimeError("killed")

    asyncio.run(manager.save(step, {"step": step}, save_model))


def _steps(root: Path) -> list[int]:
    return sorted(s for p in root.glob("checkpoint-*") if (s := checkpoint_step(p)) is not None)


def test_keep_last_n_deletes_old_checkpoints_only_once_a_new_one_is_complete(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last_n=2)
    for step in (1, 2, 3, 4):
        _save(manager, step)
    assert _steps(tmp_path) == [3, 4]
    with pytest.raises(RuntimeError, match="killed"):
        _save(manager, 5, fail=True)
    assert _steps(tmp_path) == [3, 4] and (tmp_path / "checkpoint-5.tmp").is_dir()  # nothing deleted yet
    assert manager.latest() == tmp_path / "checkpoint-4"
    _save(manager, 5)
    assert _steps(tmp_path) == [4, 5] and not (tmp_path / "checkpoint-5.tmp").exists()
    assert all(checkpoint_problem(tmp_path / f"checkpoint-{s}") is None for s in (4, 5))
    assert CheckpointManager(tmp_path).keep_last_n is None  # the default keeps every checkpoint
    with pytest.raises(ValueError, match="keep_last_n"):
        CheckpointManager(tmp_path, keep_last_n=0)


def test_a_resumed_run_overwrites_its_own_steps_and_keeps_later_ones_of_the_replaced_run(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last_n=1)
    for step in (1, 2, 3):
        _save(manager, step)
    (tmp_path / "checkpoint-1.tmp").mkdir()  # left by a process killed while saving step 1
    _save(manager, 2)  # a run resumed from checkpoint-1 saves step 2 again
    assert _steps(tmp_path) == [2, 3] and not (tmp_path / "checkpoint-1.tmp").exists()
    assert not (tmp_path / "checkpoint-2.old").exists()
    assert CheckpointManager.load_state(tmp_path / "checkpoint-2")["step"] == 2
