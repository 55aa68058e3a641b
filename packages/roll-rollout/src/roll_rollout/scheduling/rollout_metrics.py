"""`RolloutMetrics`: the `rollout/*` metrics the scheduler attaches to each `RolloutBatch`.

Between two batches it counts events (failed episodes by kind, given-up, stale and filtered groups,
worker restarts and recycles), keeps the failed episodes and the last stats each env worker reported.
`take` turns them, with the ledger's outcomes since the previous batch, the staleness of the batch's
turns and how its turns' answers fared, into one flat dict with the same keys in every batch (0 when
nothing happened).

Turns by answer (they add up to the batch's turns): `rollout/valid_turns` (the env read the answer and
applied it), `rollout/refused_turns` (read, but the env refused an action: `Turn.action_is_refused`),
`rollout/unparsable_turns` (the answer was not read, or not in full: `Turn.action_is_valid` False, whether
or not an action was refused).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from roll_rollout.scheduling.groups import Ledger
from roll_rollout.schema import Trajectory

COUNTED = (
    "rollout/env_errors",
    "rollout/env_timeouts",
    "rollout/policy_errors",
    "rollout/given_up_groups",
    "rollout/stale_groups",
    "rollout/filtered_groups",
    "rollout/env_worker_restarts",
    "rollout/env_worker_recycles",
    "rollout/backup_episodes",
    "rollout/backup_replicas_raced",
    "rollout/backup_replicas_unraced",
)
"""Event counters present in every batch's metrics."""

_log = logging.getLogger(__name__)


class RolloutMetrics:
    """Rollout events, failed episodes and env-worker stats since the previous batch."""

    def __init__(self) -> None:
        self.last_failure = ""  # the error text of the latest failed episode (for error messages)
        self._failed: list[Trajectory] = []
        self._counts: dict[str, float] = {}
        self._worker_stats: dict[int, dict[str, Any]] = {}
        self._replica_problems: set[str] = set()

    def count(self, name: str, value: float = 1.0) -> None:
        """Add `value` to the event counter `name`."""
        self._counts[name] = self._counts.get(name, 0.0) + value

    def note_stats(self, w: int, stats: dict[str, Any]) -> None:
        """The latest stats env worker `w` reported (hung env calls, threads)."""
        self._worker_stats[w] = stats

    def note_replica(self, problem: str | None) -> None:
        """A backup replica ended healthy before the attempts it replicates: it trained at once (None), or it
        waits under the keep rule for `problem`, which is logged the first time it comes."""
        if problem is None:
            self.count("rollout/backup_replicas_raced")
            return
        self.count("rollout/backup_replicas_unraced")
        if problem not in self._replica_problems:
            self._replica_problems.add(problem)
            _log.warning("a backup replica waits for its original (the keep rule): %s", problem)

    def note_failure(self, traj: Trajectory, kind: str) -> None:
        """A failed episode (`kind` from `failure_kind`): kept for the next batch and counted."""
        self._failed.append(traj)
        self.count(f"rollout/{kind}s")
        self.last_failure = traj.error or ""

    def take_failed(self) -> list[Trajectory]:
        """The episodes that failed since the previous call."""
        failed, self._failed = self._failed, []
        return failed

    def take(
        self,
        ledger: Ledger,
        trajs: Sequence[Trajectory],
        policy_version: int,
        queued_groups: int,
        running_groups: int,
    ) -> dict[str, float]:
        """The metrics of a batch of `trajs`, sampled while the policy was at `policy_version`; resets the
        counters and the ledger's delta."""
        delta = ledger.take_delta()
        counts, self._counts = self._counts, {}
        behind = [policy_version - turn.policy_version for t in trajs for turn in t.turns]
        answers = turn_answers(trajs)
        stats = self._worker_stats.values()
        metrics = {  # stable names: every key in every batch, 0 when nothing happened
            **dict.fromkeys(COUNTED, 0.0),
            **counts,
            "rollout/failed_episodes": float(delta["failed"]),
            "rollout/dropped_episodes": float(delta["dropped_incomplete"]),
            "rollout/stale_episodes": float(delta["stale"]),
            "rollout/filtered_episodes": float(delta["filtered"]),
            "rollout/straggler_episodes": float(delta["straggler"]),
            "rollout/cancelled_episodes": float(delta["cancelled"]),
            "rollout/lost_episodes": float(delta["lost"]),
            "rollout/queued_groups": float(queued_groups),
            "rollout/running_groups": float(running_groups),
            "rollout/hung_env_calls": float(sum(s.get("hung_env_calls", 0) for s in stats)),
            "rollout/env_worker_threads_max": float(max((s.get("threads", 0) for s in stats), default=0)),
            "rollout/valid_turns": float(answers["valid"]),
            "rollout/refused_turns": float(answers["refused"]),
            "rollout/unparsable_turns": float(answers["unparsable"]),
        }
        if behind:
            metrics["rollout/staleness/mean"] = sum(behind) / len(behind)
            metrics["rollout/staleness/max"] = float(max(behind))
        return metrics


def turn_answers(trajs: Sequence[Trajectory]) -> dict[str, int]:
    """How many turns of `trajs` were `valid` (read and applied), `refused` (read, an action refused) and
    `unparsable` (no action read); every turn is exactly one of them."""
    counts = {"valid": 0, "refused": 0, "unparsable": 0}
    for traj in trajs:
        for turn in traj.turns:
            kind = (
                "unparsable" if not turn.action_is_valid else "refused" if turn.action_is_refused else "valid"
            )
            counts[kind] += 1
    return counts
