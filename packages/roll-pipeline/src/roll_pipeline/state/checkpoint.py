"""Checkpoints that survive a crash mid-write and say so when a file is damaged later.

`run_dir/checkpoints/checkpoint-{step}/` holds `model/` (the train strategy's files: weights,
tokenizer, optimiser and LR-scheduler state, its RNG), `critic/` (gae), `pipeline_state.json` (step, the
rollout schedulers' state, KL controller, global RNGs, tracker run id; docs/checkpoints.md) and, written
last, `manifest.json`: the size and sha256 of every other file. A checkpoint is written into a `.tmp`
folder and renamed into place only when complete, so a crash (even `kill -9`) leaves at worst a stray
`.tmp` folder, never a half checkpoint under a valid name; with `keep_last_n` older checkpoints are
deleted only after the new one is in place.

Loading verifies the manifest first: a truncated, missing or altered file raises `CheckpointError`
naming the file and the newest earlier checkpoint that verifies. `newest_verified` finds that
checkpoint (`CheckpointManager.latest` uses it, warning when it passes over a damaged newer one).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST_FILE",  # name of the manifest inside a checkpoint folder
    "STATE_FILE",  # name of the pipeline state inside a checkpoint folder
    "CheckpointError",  # missing, incomplete or damaged checkpoint
    "CheckpointManager",  # save / latest / load_state under a checkpoints/ folder
    "checkpoint_problem",  # why a checkpoint does not verify, or None
    "newest_verified",  # the newest checkpoint under a folder that verifies
    "verify_checkpoint",  # raise CheckpointError unless a checkpoint verifies
    "write_manifest",  # size + sha256 of every file of a checkpoint folder
]

MANIFEST_FILE = "manifest.json"
"""The manifest: {"format": 1, "files": {relative path: {"size": bytes, "sha256": hex}}}."""

STATE_FILE = "pipeline_state.json"
"""The pipeline's own state (step, rollout schedulers, KL controller, global RNGs, tracker run id)."""

_NAME = re.compile(r"^checkpoint-(\d+)$")
_verified: dict[Path, tuple[tuple[str, int, int], ...]] = {}  # folder -> file stats when last verified


class CheckpointError(Exception):
    """A checkpoint folder is missing, incomplete or damaged (the message names the file and the fix)."""


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() != MANIFEST_FILE
    )


def write_manifest(folder: Path) -> Path:
    """Write `folder/manifest.json` listing the size and sha256 of every other file; return its path."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in _files(folder)
    }
    path = folder / MANIFEST_FILE
    path.write_text(json.dumps({"format": 1, "files": files}, indent=1, sort_keys=True), encoding="utf-8")
    return path


def _stats(folder: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple(
        (p.as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in [folder / MANIFEST_FILE, *_files(folder)]
    )


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` does not verify against its manifest (naming the file), or None if it does.

    A folder verified earlier in this process and unchanged since (same files, sizes and mtimes) is not
    hashed again.
    """
    folder = Path(checkpoint)
    if not folder.is_dir():
        return f"{folder} does not exist or is not a folder"
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return f"{MANIFEST_FILE} is missing (the save did not finish, or the checkpoint predates manifests)"
    key = folder.resolve()
    if _verified.get(key) == _stats(folder):
        return None
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        entries = {str(name): (int(e["size"]), str(e["sha256"])) for name, e in listed.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{MANIFEST_FILE} is damaged ({type(exc).__name__}: {exc})"
    for required in (STATE_FILE, "model/"):
        if not any(name == required or name.startswith(required) for name in entries):
            return f"the manifest lists no {required}: not a pipeline checkpoint"
    for name, (size, _) in sorted(entries.items()):  # the cheap checks first: missing or truncated
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{name} has {actual} bytes where the manifest says {size} (truncated or overwritten)"
    for name, (_, sha) in sorted(entries.items()):
        if _sha256(folder / name) != sha:
            return f"{name} does not match its sha256 in the manifest (the file was altered or corrupted)"
    _verified[key] = _stats(folder)
    return None


def _replace_folder(new: Path, final: Path) -> None:
    """Rename `new` to `final`. An existing `final` (the same step saved again after a resume) is renamed
    to `.old` first and deleted last: a kill in between leaves no half-written folder under a checkpoint
    name (at worst `checkpoint-N.old`, complete, while the earlier checkpoints resume as usual)."""
    if not final.exists():
        new.rename(final)
        return
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    final.rename(old)
    new.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def checkpoint_step(checkpoint: Path) -> int | None:
    """The step of a `checkpoint-N` folder, or None for any other name."""
    match = _NAME.match(Path(checkpoint).name)
    return int(match.group(1)) if match else None


def newest_verified(root: Path, before: int | None = None) -> Path | None:
    """The newest `checkpoint-N` folder under `root` (with N < `before`, when given) that verifies."""
    found = [(checkpoint_step(p), p) for p in Path(root).glob("checkpoint-*") if p.is_dir()]
    for step, path in sorted(((s, p) for s, p in found if s is not None), reverse=True):
        if (before is None or step < before) and checkpoint_problem(path) is None:
            return path
    return None


def verify_checkpoint(checkpoint: Path) -> None:
    """Raise `CheckpointError` naming the damaged file and the newest earlier checkpoint that verifies."""
    checkpoint = Path(checkpoint)
    problem = checkpoint_problem(checkpoint)
    if problem is None:
        return
    step = checkpoint_step(checkpoint)
    earlier = newest_verified(checkpoint.parent, before=step) if step is not None else None
    fix = (
        f"The newest earlier checkpoint that verifies is {earlier}: resume from it with "
        f"resume_from_checkpoint={earlier}"
        if earlier is not None
        else "No earlier checkpoint next to it verifies: start the run without resume_from_checkpoint, or "
        "pass a checkpoint-N folder written by `roll train`"
    )
    raise CheckpointError(f"checkpoint {checkpoint} does not verify: {problem}. {fix}.")


class CheckpointManager:
    """Writes and finds checkpoints under `root`; keeps the newest `keep_last_n` (None: all)."""

    def __init__(self, root: Path, keep_last_n: int | None = None) -> None:
        if keep_last_n is not None and keep_last_n < 1:
            raise ValueError(f"keep_last_n must be >= 1 or None (keep all), got {keep_last_n}")
        self.root = Path(root)
        self.keep_last_n = keep_last_n

    @staticmethod
    def model_dir(checkpoint: Path) -> Path:
        """Where a checkpoint keeps the model files."""
        return Path(checkpoint) / "model"

    async def save(
        self, step: int, state: dict[str, Any], save_model: Callable[[Path], Awaitable[Any]]
    ) -> Path:
        """Write checkpoint `step` atomically; `save_model(path)` writes the model files into `path`.

        Killed at any point, this leaves every earlier complete checkpoint as it was: the new one is written
        into `checkpoint-{step}.tmp` and renamed into place only once its manifest is written, and older
        checkpoints beyond `keep_last_n` are deleted only after that.
        """
        final = self.root / f"checkpoint-{step}"
        tmp = self.root / f"checkpoint-{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed while saving
        tmp.mkdir(parents=True)
        await save_model(self.model_dir(tmp))
        (tmp / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
        write_manifest(tmp)  # last: a folder with a manifest is complete
        _replace_folder(tmp, final)
        (self.root / "latest").write_text(final.name, encoding="utf-8")
        self._prune(step)
        return final

    def _prune(self, step: int) -> None:
        """Delete the complete checkpoints before the newest `keep_last_n` up to `step`, and stray `.tmp`
        folders of earlier steps. Later steps (from a run that resumed from an earlier checkpoint) stay."""
        if self.keep_last_n is None:
            return
        steps = sorted(
            n for p in self.root.glob("checkpoint-*") if (n := checkpoint_step(p)) is not None and n <= step
        )
        for old in steps[: -self.keep_last_n]:
            shutil.rmtree(self.root / f"checkpoint-{old}")
            _verified.pop((self.root / f"checkpoint-{old}").resolve(), None)
        for stray in self.root.glob("checkpoint-*.tmp"):
            if (n := checkpoint_step(stray.with_suffix(""))) is not None and n < step:
                shutil.rmtree(stray, ignore_errors=True)

    def latest(self) -> Path | None:
        """The newest checkpoint that verifies, or None; warns when it passes over a damaged newer one."""
        found = newest_verified(self.root)
        newer = [
            p
            for p in self.root.glob("checkpoint-*")
            if (step := checkpoint_step(p)) is not None and (found is None or step > checkpoint_step(found))
        ]
        for path in sorted(newer, key=checkpoint_step):
            warnings.warn(
                f"checkpoint {path} does not verify ({checkpoint_problem(path)}); "
                f"falling back to {found or 'no checkpoint'}",
                stacklevel=2,
            )
        return found

    @staticmethod
    def load_state(checkpoint: Path) -> dict[str, Any]:
        """Verify a checkpoint against its manifest, then read its pipeline state."""
        checkpoint = Path(checkpoint)
        verify_checkpoint(checkpoint)
        try:
            state = json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
        except ValueError as exc:  # verified bytes that are not JSON: written so by a bug, not damaged later
            raise CheckpointError(f"{checkpoint / STATE_FILE} is not JSON ({exc})") from None
        if not isinstance(state, dict):
            raise CheckpointError(
                f"{checkpoint / STATE_FILE} holds a {type(state).__name__}, expected an object"
            )
        return state
