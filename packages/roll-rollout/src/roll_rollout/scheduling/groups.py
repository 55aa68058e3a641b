"""Group episodes, the ledger of every dispatched episode, and what `get_batch` returns.

A *group episode* is one seed played by every env slot of a layout group; it completes when
`group_size` of its episodes finished healthy. Every episode the scheduler dispatches ends in exactly
one ledger entry (`OUTCOMES`), so a test — or a user — can check that nothing was lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from roll_rollout.policies.policy import SamplingSettings
from roll_rollout.scheduling.backups import Attempts
from roll_rollout.schema import Trajectory

OUTCOMES = (
    "delivered",  # in a batch returned by get_batch
    "failed",  # the episode itself failed (env error, env timeout, policy error)
    "straggler",  # finished, but its group episode was already complete or given up, or its place settled
    "cancelled",  # stopped before it finished (straggler of a complete group or a settled place, or at stop)
    "stale",  # its group had a turn older than the staleness bound at get_batch
    "filtered",  # its group was removed by the StarPO-S group filter
    "dropped_incomplete",  # healthy, but its group episode was given up after too many failures
    "lost",  # its env worker died or was recycled while it ran
    "unconsumed",  # finished, but its group was still queued or incomplete when the scheduler stopped
)
"""Where a dispatched episode can end up; `RolloutScheduler.ledger` counts each."""


class GroupFilter(Protocol):
    """Chooses which collected groups a batch keeps (StarPO-S: those of largest reward std)."""

    def __call__(self, scores: Sequence[Sequence[float]], keep: int) -> Sequence[int]:
        """Indices of the `keep` kept groups, given the episode scores of each candidate group."""
        ...


@dataclass
class WorkerLink:
    """How the scheduler reaches one env worker: an in-process `EnvWorker` or a Ray actor.

    `submit`, `cancel` and `poll` take and return msgpack (see `EnvWorker`); `kill` stops the worker.
    """

    submit: Callable[[bytes], Awaitable[Any]]
    cancel: Callable[[bytes], Awaitable[Any]]
    poll: Callable[[float], Awaitable[bytes]]
    kill: Callable[[], Any] = field(default=lambda: None)

    @classmethod
    def in_process(cls, worker: Any) -> WorkerLink:
        """A link to an `EnvWorker` living in this process."""
        return cls(worker.submit, worker.cancel, worker.poll, worker.close)


class SpawnWorker(Protocol):
    """Starts env worker `index` (hosting `EnvLayout.env_ids_of_worker(index)`) and links to it."""

    def __call__(self, index: int) -> WorkerLink:
        """A link to a freshly started worker."""
        ...


@dataclass
class GroupEpisode:
    """One seed played by the env slots of a layout group, each of its episodes sampled alike."""

    key: int  # unique; the `group_id` of its trajectories
    layout_group: int
    tag: str
    seed: int
    explicit_seed: bool
    sampling: SamplingSettings  # of every episode of it: replays and backups sample as its first episodes do
    version: int = 0  # the scheduler's policy version when it began (a replica's turns must all be of it)
    running: dict[int, int] = field(default_factory=dict)  # episode id -> env slot, not yet back
    finished: list[Trajectory] = field(default_factory=list)
    failures: int = 0
    closed: bool = False  # complete or given up: later finishers are stragglers
    borrowed: list[int] = field(default_factory=list)  # other layout groups lent to its backup episodes
    backed_up: set[int] = field(default_factory=set)  # episode ids that got a backup
    attempts: dict[int, Attempts] = field(default_factory=dict)  # episode id -> its place, until it settles

    def min_version(self) -> int | None:
        """The oldest policy version among its turns (None without turns)."""
        versions = [turn.policy_version for t in self.finished for turn in t.turns]
        return min(versions) if versions else None


@dataclass
class RolloutBatch:
    """What `get_batch` returns: whole groups of trajectories, the failures, and rollout metrics.

    `failed` holds the episodes that failed since the previous batch (not trained on; they count as
    failures in success rates). `metrics` are `rollout/*` counts since the previous batch.
    """

    trajectories: list[Trajectory]
    failed: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.trajectories)


class Ledger:
    """Counts the outcome of every dispatched episode, in total and since the last `take_delta`."""

    def __init__(self) -> None:
        self.total: Counter[str] = Counter()
        self._delta: Counter[str] = Counter()

    def add(self, outcome: str, count: int = 1) -> None:
        """Record `count` episodes ending in `outcome`."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown ledger outcome {outcome!r}; expected one of {OUTCOMES}")
        if count:
            self.total[outcome] += count
            self._delta[outcome] += count

    def take_delta(self) -> Counter[str]:
        """Outcomes since the previous call."""
        delta, self._delta = self._delta, Counter()
        return delta
