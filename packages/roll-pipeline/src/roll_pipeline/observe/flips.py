"""Which validation episodes changed outcome since the last validation (`val/flips/...`).

A validation pass plays the same seeds every time (`validation_seeds`), so its episodes can be compared one
by one: a success rate that stays put may hide as many episodes won as lost, and a rate that moves says
nothing of whether the policy learnt new maps or traded some for others. Episodes are matched by tag and
seed; a seed played by several env slots (a group) counts its successes, and a failed episode (an env
error) counts as a failure, as in every success rate. The first validation has nothing to compare with.
The last outcomes travel in checkpoints, so a resumed run reports what the uninterrupted one would.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from roll_rollout import RolloutBatch

__all__ = ["ValidationFlips"]

STATE_KEY = "val_successes"


def _successes(batch: RolloutBatch) -> Counter[str]:
    """Successes per `tag|seed`, every seed of the batch present (0 where none succeeded)."""
    out: Counter[str] = Counter()
    for traj in batch.trajectories:
        out[f"{traj.tag}|{traj.seed}"] += int(traj.success)
    for traj in batch.failed:
        out[f"{traj.tag}|{traj.seed}"] += 0
    return out


class ValidationFlips:
    """The validation episodes won and lost since the previous validation pass."""

    def __init__(self) -> None:
        self._last: dict[str, int] | None = None

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """`val/flips/fail_to_success` and `val/flips/success_to_fail` against the last pass (none at the
        first); remembers this pass's outcomes."""
        now, last = _successes(batch), self._last
        self._last = dict(now)
        if last is None:
            return {}
        keys = set(now) | set(last)
        return {
            "val/flips/fail_to_success": float(sum(max(0, now[k] - last.get(k, 0)) for k in keys)),
            "val/flips/success_to_fail": float(sum(max(0, last.get(k, 0) - now[k]) for k in keys)),
        }

    def state(self) -> dict[str, Any]:
        """JSON for the checkpoint's pipeline state (nothing before the first validation)."""
        return {} if self._last is None else {STATE_KEY: dict(self._last)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """The last outcomes from a checkpoint's pipeline state (older checkpoints have none)."""
        last = state.get(STATE_KEY)
        self._last = None if last is None else {str(k): int(v) for k, v in last.items()}
