"""`SchedulerSettings`: how the `RolloutScheduler` runs (mode, fault limits, timeouts, StarPO-S filter)."""

from __future__ import annotations

from dataclasses import dataclass

from roll_rollout.errors import SchedulerError


@dataclass(frozen=True)
class SchedulerSettings:
    """How the scheduler runs; the pipeline fills these from `AgenticConfig`."""

    async_generation_ratio: int = 0
    """0: synchronous; r > 0: generate during training, turns at most r policy versions old."""
    max_failures_per_group: int = 4
    """Failed episodes a group episode survives (each replayed) before it is given up."""
    batch_timeout_s: float = 900.0
    """`get_batch` raises if no batch is ready within this many seconds."""
    max_consecutive_given_up: int = 16
    """`get_batch` raises when this many group episodes in a row were given up (every env failing)."""
    max_worker_restarts: int = 16
    """Env-worker restarts (deaths and recycles) tolerated over the scheduler's life."""
    filter_keep_fraction: float = 1.0
    """StarPO-S: collect need / f groups per tag and keep `need` of them with `group_filter`."""
    poll_wait_s: float = 0.05
    """Longest wait of one `poll` call on a worker."""
    race_backups: bool = False
    """True (validation, whose episodes train nothing and whose pass needs every seed): a backup races the
    episode it backs up, and the first episodes of a group episode to finish complete it. False (training): an
    episode that ends is trained whatever its time; its backup replaces it only when it fails (an env error, or
    its call timed out), so call durations never choose which episodes train (see `roll_rollout.scheduling.scheduler`),
    except that an exact replica may race it (`keyed_sampling`)."""
    keyed_sampling: bool = False
    """Whether the policy samples each turn as a function of its prompt ids, its sample key and its weights
    (roll's hf and vLLM servers: `GenerateRequest.sample_key`): then a backup, which reuses its original's
    keys, replays the original, and in training the first of the two to end trains, when the checks of
    `roll_rollout.scheduling.backups.replica_problem` pass. False: backups never race in training."""

    def __post_init__(self) -> None:
        if self.async_generation_ratio < 0 or self.max_failures_per_group < 0:
            raise SchedulerError("async_generation_ratio and max_failures_per_group must be >= 0")
        if not 0 < self.filter_keep_fraction <= 1:
            raise SchedulerError(f"filter_keep_fraction must be in (0, 1], got {self.filter_keep_fraction}")
