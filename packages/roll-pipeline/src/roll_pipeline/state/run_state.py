"""A checkpoint's pipeline state (what no worker owns), and which checkpoint a run resumes from.

The models, optimisers, LR schedulers and the trainers' torch RNGs are the workers' files (`model/`,
`critic/`). `pipeline_state.json` holds the rest: the step, the train and validation schedulers' seed
streams, id counters and round-robin cursors (which seed each env slot plays next, and so each turn's
sampling key), the KL controller, the tracker's run id, and the python, numpy and torch (CPU and CUDA)
generators of the driver process, which with `cluster.backend: local` are also every worker's. All of it
is JSON (no pickle: a checkpoint may come from anywhere); a malformed state raises `CheckpointError`
before anything changes. docs/checkpoints.md has the whole story.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from roll_rollout import RolloutScheduler

from roll_pipeline.state.checkpoint import (
    STATE_FILE,
    CheckpointError,
    CheckpointManager,
    checkpoint_step,
    newest_verified,
)

__all__ = [
    "AUTO_RESUME",
    "global_rng_state",
    "pipeline_state",
    "read_resume_state",
    "restore_pipeline_state",
    "set_global_rng_state",
]


class KLState(Protocol):
    """What a checkpoint keeps of the KL controller (`trainer.kl_control.KLControl`)."""

    def state(self) -> dict[str, float]: ...

    def load_state(self, state: dict[str, float]) -> None: ...


class TrackerIds(Protocol):
    """What a checkpoint keeps of the tracker (`observe.tracking.Tracker`): its runs' ids."""

    def run_ids(self) -> dict[str, str]: ...


AUTO_RESUME = "auto"
"""`resume_from_checkpoint: auto`: the run folder's newest verified checkpoint, or a fresh start."""


def _bytes_of(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode("ascii")


def _tensor_of(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)


def global_rng_state() -> dict[str, Any]:
    """The python, numpy and torch generators of this process, JSON-friendly."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "torch": _bytes_of(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # reading it must not start CUDA
        state["cuda"] = [_bytes_of(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_global_rng_state(state: Any) -> None:
    """Restore what `global_rng_state` returned; a malformed state raises `CheckpointError`, changing nothing."""
    try:
        if not isinstance(state, Mapping):
            raise TypeError(f"expected an object, got {type(state).__name__}")
        version, internal, gauss = state["python"]
        python = (int(version), tuple(int(v) for v in internal), None if gauss is None else float(gauss))
        kind, keys, pos, has_gauss, cached = state["numpy"]
        numpy_state = (str(kind), np.array(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached))
        cpu = _tensor_of(state["torch"])
        cuda = [_tensor_of(s) for s in state.get("cuda", [])]
        probe = random.Random()
        probe.setstate(python)  # validates before the real generators change
        np.random.RandomState().set_state(numpy_state)
        torch.Generator().set_state(cpu)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"the checkpoint's global RNG state is malformed ({type(exc).__name__}: {exc}); it was written by "
            "another roll version or damaged: resume from another checkpoint"
        ) from None
    random.setstate(python)
    np.random.set_state(numpy_state)
    torch.set_rng_state(cpu)
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def read_resume_state(
    setting: str | None, checkpoints: CheckpointManager
) -> tuple[Path | None, dict[str, Any] | None]:
    """The checkpoint a run resumes from and its verified pipeline state, or (None, None) for a fresh start.

    `setting` is `resume_from_checkpoint`: None, a checkpoint folder, or `auto` (the newest checkpoint under
    `checkpoints` that verifies; none yet is a fresh start). Says on the console which it is.
    """
    from tqdm.auto import tqdm

    if not setting:
        return None, None
    path = checkpoints.latest() if setting == AUTO_RESUME else Path(setting).expanduser()
    if path is None:
        tqdm.write(
            f"[roll] resume_from_checkpoint=auto: no checkpoint in {checkpoints.root} yet, starting afresh"
        )
        return None, None
    state = checkpoints.load_state(path)
    step = state.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{path / STATE_FILE}: 'step' must be an int >= 0, got {step!r}")
    ids = state.get("tracker", {})
    if not isinstance(ids, Mapping) or not all(isinstance(v, str) for v in ids.values()):
        raise CheckpointError(f"{path / STATE_FILE}: 'tracker' must map names to run ids, got {ids!r}")
    newest = newest_verified(checkpoints.root)
    if newest is not None and (checkpoint_step(newest) or 0) > step:
        tqdm.write(
            f"[roll] resuming from {path.name}, but {newest.name} is newer: it belongs to the run being"
            " replaced, and auto resume would pick it until this run overwrites it"
        )
    tqdm.write(f"[roll] resuming from {path} (step {step})")
    return path, state


def pipeline_state(
    step: int,
    skipped_in_a_row: int,
    rollouts: Mapping[str, RolloutScheduler],
    kl: KLState,
    tracker: TrackerIds,
) -> dict[str, Any]:
    """The `pipeline_state.json` of a checkpoint (JSON: no pickle); `rollouts`: the run's schedulers by name
    ("train", "val", and "demo" for the demonstrated episodes of `demonstration_steps`), each seed stream kept
    as `<name>_rng`."""
    return {
        "step": step,
        "skipped_in_a_row": skipped_in_a_row,
        **{f"{name}_rng": rollout.rng_state() for name, rollout in rollouts.items()},
        **kl.state(),
        "global_rng": global_rng_state(),
        "tracker": tracker.run_ids(),
    }


def restore_pipeline_state(
    state: Mapping[str, Any], rollouts: Mapping[str, RolloutScheduler], kl: KLState
) -> tuple[int, int]:
    """Restore the schedulers and the KL controller from `pipeline_state`; returns (step, skipped_in_a_row).
    Keys older checkpoints lack (val_rng, demo_rng, skipped_in_a_row, global_rng, tracker) are optional;
    train_rng is not."""
    for name, rollout in rollouts.items():
        if name == "train" or f"{name}_rng" in state:
            rollout.set_rng_state(state[f"{name}_rng"])
    kl.load_state(dict(state))
    return int(state["step"]), int(state.get("skipped_in_a_row", 0))
