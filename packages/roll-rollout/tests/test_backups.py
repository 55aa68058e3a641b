"""Backup episodes: an episode whose reset or step runs past the slow-call threshold gets the same seed played
on a free env slot, so a hung call does not hold its batch until `env_step_timeout_s`."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from roll_rollout import EnvCallLimits, EnvLayout, SchedulerSettings
from roll_rollout.env_calls import RETHRESHOLD_EVERY, SLOW_CALL_FACTOR, SLOW_CALL_MIN_SAMPLES, EnvCalls
from roll_rollout.testing import CountdownEnv, FaultyEnv, ScriptedPolicy

TIMEOUT_S = 120.0
"""Never reached in these tests: a batch that came back with no env timeout did not wait for one."""


class OwnStateFaultyEnv(FaultyEnv):
    """A `FaultyEnv` whose calls need no isolation lock (so a hung one holds nothing but itself)."""

    owns_random_state = True


def first_env_hangs(release: threading.Event):
    """An env factory whose first env (slot 0's, built with the worker) hangs on every step until `release`;
    every later env, slot 0's replacement included, is healthy."""
    made = iter(range(100_000))

    def factory(_type, _config):
        return OwnStateFaultyEnv(
            CountdownEnv(min_turns=2), 0.0, 1.0 if next(made) == 0 else 0.0, release=release
        )

    return factory


def run_batches(scheduler, *calls):
    async def scenario():
        batches = [await scheduler.get_batch(n, seeds) for n, seeds in calls]
        await scheduler.stop()
        return batches

    return asyncio.run(scenario())


LIMITS = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=TIMEOUT_S, backup_after_s=0.2)


@pytest.mark.parametrize("concurrent", [8, 1])
def test_a_hung_step_is_backed_up_on_a_finished_slot_of_its_group(scheduler_factory, answer_ids, concurrent):
    """With one env call allowed at a time (`concurrent=1`) the backup runs only because the slow call handed
    its permit on."""
    release = threading.Event()
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=dataclasses.replace(LIMITS, max_env_step_concurrent=concurrent),
    )
    try:
        (batch,) = run_batches(scheduler, (4, None))
    finally:
        release.set()
    assert len(batch) == 4 and all(t.error is None for t in batch.trajectories)
    assert batch.metrics["rollout/backup_episodes"] >= 1 and batch.metrics["rollout/env_timeouts"] == 0
    assert 0 not in {t.env_id for t in batch.trajectories}  # slot 0 never finished: its backup did
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_a_validation_seed_is_backed_up_on_an_idle_layout_group(scheduler_factory, answer_ids):
    """One slot per group (as validation runs): the backup borrows an idle layout group, and every seed is
    played once in the batch."""
    release = threading.Event()
    scheduler = scheduler_factory(
        EnvLayout(4, 1, ("A",), (4,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=LIMITS,
    )
    seeds = [11, 12]
    try:
        first, second = run_batches(scheduler, (2, seeds), (2, seeds))
    finally:
        release.set()
    for batch in (first, second):
        assert sorted(t.seed for t in batch.trajectories) == seeds
        assert all(t.error is None for t in batch.trajectories)
    assert first.metrics["rollout/backup_episodes"] == 1 and first.metrics["rollout/env_timeouts"] == 0
    hung_seed = next(t for t in first.trajectories if t.seed == 11)
    assert hung_seed.env_id != 0  # another layout group's slot played it
    assert second.metrics["rollout/backup_episodes"] == 0  # slot 0's new env is healthy
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_no_backups_when_turned_off(scheduler_factory, answer_ids):
    release = threading.Event()
    limits = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=0.5, backup_after_s=0.0)
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=limits,
        settings=SchedulerSettings(max_failures_per_group=4),
    )
    try:
        (batch,) = run_batches(scheduler, (4, None))
    finally:
        release.set()
    assert len(batch) == 4
    assert batch.metrics["rollout/backup_episodes"] == 0 and batch.metrics["rollout/env_timeouts"] == 1


def test_the_slow_call_threshold_follows_the_workers_recent_calls():
    calls = EnvCalls(timeout_s=30.0, backup_after_s=2.0)
    assert calls.slow_after_s() == 2.0  # no calls timed yet: the floor
    for _ in range(SLOW_CALL_MIN_SAMPLES):
        calls.note_duration(0.001)
    assert calls.slow_after_s() == 2.0  # 200 x 1 ms is under the floor
    durations = [0.002 * (i + 1) for i in range(2 * RETHRESHOLD_EVERY - SLOW_CALL_MIN_SAMPLES)]  # 2 ms ..
    for seconds in durations:
        calls.note_duration(seconds)
    recent = sorted([0.001] * SLOW_CALL_MIN_SAMPLES + durations)
    median = recent[len(recent) // 2]  # about 0.13 s
    assert calls.slow_after_s() == pytest.approx(SLOW_CALL_FACTOR * median)
    for _ in range(2 * RETHRESHOLD_EVERY):  # slower calls: 200 x their median passes the 30 s timeout
        calls.note_duration(1.0)
    assert calls.slow_after_s() is None
    assert EnvCalls(backup_after_s=0.0).slow_after_s() is None
    with pytest.raises(ValueError, match="backup_after_s"):
        EnvCalls(backup_after_s=-1.0)
