"""Backup replicas: a backup reuses its original's sampling keys, so with a policy that samples by key it
plays the original's episode token for token, and in training the first of the two to end trains, so a hung
call costs about the slow-call threshold, not `env_step_timeout_s`. Where that cannot be shown (the policy is
not declared keyed, other weights, a prefix not replayed) the keep rule holds and the metric says so."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest
from roll_rollout import EnvCallLimits, EnvLayout, GenerateResult, SchedulerSettings, Trajectory, Turn
from roll_rollout.scheduling.backups import Attempts, replica_problem
from roll_rollout.schema import prefix_digest
from roll_rollout.testing import CountdownEnv

HANG_AT_STEP = 2
"""The step (0-based) at which slot 0's first env hangs: two turns are played and reported before it."""
TIMEOUT_S = 120.0
"""env_step_timeout_s where a replica races: a batch back without an env timeout did not wait for it."""
LIMITS = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=TIMEOUT_S, backup_after_s=0.2)


class KeyedPolicy:
    """A deterministic sampler: the response is one of `choices`, picked by a hash of (prompt ids, sample key),
    so two requests get the same tokens exactly when their prompt and key agree. `version` stamps results."""

    def __init__(self, choices, version: int = 0) -> None:
        self.choices, self.version = [list(c) for c in choices], version

    async def generate(self, request):
        digest = hashlib.blake2b(repr((request.prompt_ids, request.sample_key)).encode(), digest_size=8)
        ids = self.choices[int.from_bytes(digest.digest(), "little") % len(self.choices)]
        return GenerateResult(ids, [-0.5] * len(ids), "stop", self.version)


class FreshPolicy:
    """Ignores the key: every request gets a token no request got before, so a replay answers otherwise."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request):
        self.calls += 1
        return GenerateResult([1000 + self.calls], [-0.5], "stop", 0)


class HangingCountdown(CountdownEnv):
    """A countdown whose step `hang_at` blocks until `release` (only the first env made hangs)."""

    owns_random_state = True

    def __init__(self, hang_at: int | None, release: threading.Event) -> None:
        super().__init__(min_turns=5, spread=1)
        self.hang_at, self.release, self.steps = hang_at, release, 0

    def step(self, action):
        if self.steps == self.hang_at:
            self.release.wait()
        self.steps += 1
        return super().step(action)


def factory(release: threading.Event | None):
    made = iter(range(100_000))

    def make(_type, _config):
        first = next(made) == 0
        hang_at = HANG_AT_STEP if first and release is not None else None
        return HangingCountdown(hang_at, release or threading.Event())

    return make


def one_batch(scheduler_factory, policy, release, settings, limits=LIMITS):
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        policy,
        env_factory=factory(release),
        limits=limits,
        settings=settings,
    )

    async def scenario():
        try:
            return await scheduler.get_batch(4)
        finally:
            await scheduler.stop()

    try:
        batch = asyncio.run(scenario())
    finally:
        if release is not None:
            release.set()
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched
    return batch


def played(traj):
    return [(t.observation, t.response_ids, t.policy_version) for t in traj.turns]


@pytest.fixture
def choices(chat_tokenizer):
    return [chat_tokenizer.encode(w, add_special_tokens=False) for w in ("Left", "Right", "Up", "Down")]


def test_a_replica_plays_its_original_token_for_token_and_trains_without_waiting(scheduler_factory, choices):
    """The reference: the same batch with no hang. With the hang, slot 0's place is trained from its replica,
    on another slot, before the 120 s timeout (the batch would time out at 20 s otherwise), and the replica's
    turns equal what slot 0 plays without the hang."""
    keyed = SchedulerSettings(keyed_sampling=True, batch_timeout_s=20.0)
    reference = one_batch(scheduler_factory, KeyedPolicy(choices), None, keyed)
    batch = one_batch(scheduler_factory, KeyedPolicy(choices), threading.Event(), keyed)
    assert batch.metrics["rollout/env_timeouts"] == 0 and batch.metrics["rollout/backup_replicas_raced"] == 1
    expected = next(t for t in reference.trajectories if t.env_id == 0)
    replica = next(t for t in batch.trajectories if t.episode_id >= 1 << 62)
    assert replica.env_id != 0 and len(replica.turns) == 5
    assert played(replica) == played(expected)
    others = sorted(played(t) for t in batch.trajectories if t is not replica)
    assert others == sorted(played(t) for t in reference.trajectories if t.env_id != 0)


@pytest.mark.parametrize(
    ("policy", "settings", "problem"),
    [
        ("keyed", SchedulerSettings(), "not declared to sample by key"),
        ("versioned", SchedulerSettings(keyed_sampling=True), "other weights"),
        ("unkeyed", SchedulerSettings(keyed_sampling=True), "did not play what"),
    ],
)
def test_a_replica_that_cannot_be_shown_exact_waits_for_the_timeout(
    scheduler_factory, choices, policy, settings, problem, caplog
):
    """Not declared keyed, a policy at other weights than the group began with, a policy that ignores the key:
    the replica ends first but the original holds its place until its call times out (the keep rule), and the
    metric and a log line say why."""
    policies = {"keyed": KeyedPolicy(choices), "versioned": KeyedPolicy(choices, version=3)}
    fast = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=1.5, backup_after_s=0.2)
    with caplog.at_level("WARNING"):
        batch = one_batch(
            scheduler_factory, policies.get(policy) or FreshPolicy(), threading.Event(), settings, fast
        )
    assert batch.metrics["rollout/env_timeouts"] == 1 and batch.metrics["rollout/backup_replicas_raced"] == 0
    assert batch.metrics["rollout/backup_replicas_unraced"] >= 1
    assert any(problem in r.getMessage() for r in caplog.records)


def test_replica_problem_checks_every_running_attempt_before_it():
    """Pure check: exact when keyed, of the group's version, and replaying each running earlier attempt's
    reported prefix; a running attempt with no report, or a longer one, is not replayed."""
    turns = [Turn([1], [5 + i], [-0.1], 0.0, True, True, "s", 2, observation=f"o{i}") for i in range(3)]
    replica = Trajectory(0, 0, 9, "A", 1, turns=turns)
    keyed = SchedulerSettings(keyed_sampling=True)
    attempts = Attempts([4, 9], {9: replica}, {4: (2, prefix_digest(turns[:2]))})
    assert replica_problem(attempts, replica, 2, keyed) is None
    assert "other weights" in replica_problem(attempts, replica, 1, keyed)
    assert "not declared" in replica_problem(attempts, replica, 2, SchedulerSettings())
    attempts.prefixes[4] = (2, prefix_digest(turns[1:3]))
    assert "did not play" in replica_problem(attempts, replica, 2, keyed)
    attempts.prefixes[4] = (4, prefix_digest(turns))
    assert "did not play" in replica_problem(attempts, replica, 2, keyed)
    del attempts.prefixes[4]
    assert "never reported" in replica_problem(attempts, replica, 2, keyed)
