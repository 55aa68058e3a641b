"""Backup episodes: an episode whose reset or step runs past the slow-call threshold gets the same seed played
on a free env slot. In validation (`race_backups`) the first to finish counts, so a hung call does not hold its
pass until `env_step_timeout_s`; in training an episode that ends is trained whatever its time, and its backup
takes its place only once it failed."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest
from roll_rollout import (
    EnvCallLimits,
    EnvLayout,
    GenerateResult,
    SamplingSettings,
    SchedulerSettings,
    Trajectory,
)
from roll_rollout.hosting.env_calls import (
    RETHRESHOLD_EVERY,
    SLOW_CALL_FACTOR,
    SLOW_CALL_MIN_SAMPLES,
    EnvCalls,
)
from roll_rollout.scheduling.backups import Attempts
from roll_rollout.testing import CountdownEnv, FaultyEnv, ScriptedPolicy

TIMEOUT_S = 120.0
"""Never reached where backups race (validation): a batch that came back with no env timeout did not wait for
one."""
RACE = SchedulerSettings(race_backups=True)


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
def test_a_hung_step_is_backed_up_on_a_finished_slot_of_its_group(
    scheduler_factory, answer_ids, concurrent, release
):
    """Racing backups: with one env call allowed at a time (`concurrent=1`) the backup runs only because the
    slow call handed its permit on."""
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=dataclasses.replace(LIMITS, max_env_step_concurrent=concurrent),
        settings=RACE,
    )
    (batch,) = run_batches(scheduler, (4, None))
    assert len(batch) == 4 and all(t.error is None for t in batch.trajectories)
    assert batch.metrics["rollout/backup_episodes"] >= 1 and batch.metrics["rollout/env_timeouts"] == 0
    assert 0 not in {t.env_id for t in batch.trajectories}  # slot 0 never finished: its backup did
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_a_validation_seed_is_backed_up_on_an_idle_layout_group(scheduler_factory, answer_ids, release):
    """One slot per group (as validation runs): the backup borrows an idle layout group, and every seed is
    played once in the batch."""
    scheduler = scheduler_factory(
        EnvLayout(4, 1, ("A",), (4,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=LIMITS,
        settings=RACE,
    )
    seeds = [11, 12]
    first, second = run_batches(scheduler, (2, seeds), (2, seeds))
    for batch in (first, second):
        assert sorted(t.seed for t in batch.trajectories) == seeds
        assert all(t.error is None for t in batch.trajectories)
    assert first.metrics["rollout/backup_episodes"] == 1 and first.metrics["rollout/env_timeouts"] == 0
    hung_seed = next(t for t in first.trajectories if t.seed == 11)
    assert hung_seed.env_id != 0  # another layout group's slot played it
    assert second.metrics["rollout/backup_episodes"] == 0  # slot 0's new env is healthy
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_in_training_a_hung_episode_is_replaced_by_its_running_backup_at_the_timeout(
    scheduler_factory, answer_ids, release
):
    """Training: the hung episode holds its group until its call times out, then its backup (which finished
    meanwhile on a finished slot of the group) takes its place, with no replay from the start."""
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=dataclasses.replace(LIMITS, env_step_timeout_s=1.0),
    )
    (batch,) = run_batches(scheduler, (4, None))
    assert len(batch) == 4 and all(t.error is None for t in batch.trajectories)
    backups = batch.metrics["rollout/backup_episodes"]
    assert backups >= 1 and batch.metrics["rollout/env_timeouts"] == 1
    assert scheduler.dispatched == 4 + backups  # the originals and their backups: nothing replayed
    assert 0 not in {
        t.env_id for t in batch.trajectories
    }  # slot 0's episode timed out: its backup took its place
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_a_backup_samples_as_its_group_began(scheduler_factory, answer_ids, release):
    """A `set_sampling` while a group episode runs applies to the group episodes started after it: the backup
    of its hung episode samples as the group's first episodes did."""
    temperatures: list[float] = []
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids, latency=lambda r: temperatures.append(r.sampling.temperature) or 0.0),
        env_factory=first_env_hangs(release),
        limits=dataclasses.replace(LIMITS, env_step_timeout_s=1.0),
    )

    async def scenario():
        batch = asyncio.ensure_future(scheduler.get_batch(4))
        await asyncio.sleep(0)  # get_batch ran to its first wait: the group's first episodes are dispatched
        scheduler.set_sampling({"A": SamplingSettings(max_new_tokens=4, temperature=1.5)})
        try:
            return await batch
        finally:
            await scheduler.stop()

    batch = asyncio.run(scenario())
    assert batch.metrics["rollout/backup_episodes"] >= 1
    assert set(temperatures) == {1.0}


class ChoiceEnv:
    """One step: an answer holding "Left" runs long (`slow_s`, past the backup threshold) and scores 1, any
    other scores 0 at once. Its calls run in parallel (`owns_random_state`), each in a pool thread."""

    instruction = "choose"
    owns_random_state = True

    def __init__(self, slow_s: float) -> None:
        self.slow_s = slow_s

    def reset(self, seed=None, options=None):
        return "Left or Right?", {}

    def step(self, action):
        slow = "Left" in action
        if slow:
            time.sleep(self.slow_s)
        info = {"action_is_valid": True, "action_is_effective": True, "success": slow}
        return "done", float(slow), True, False, info

    def close(self):
        pass


class CoinPolicy:
    """Answers "Left" or "Right" by the parity of the request's sample key: a random policy whose draw is
    the same for the same episode id, env slot and seed, whatever else runs."""

    def __init__(self, left_ids, right_ids) -> None:
        self.answers = (list(left_ids), list(right_ids))

    async def generate(self, request):
        ids = self.answers[request.sample_key % 2]
        return GenerateResult(ids, [-0.5] * len(ids), "stop", 0)


@pytest.mark.parametrize("keyed", [False, True])
def test_backups_do_not_change_which_episodes_train(scheduler_factory, chat_tokenizer, keyed):
    """The slow action has its own reward. Training with backups keeps every episode that ended, slow or not:
    each batch is exactly the one without backups (the episodes dispatched first, same ids, same draws; the
    backups' ids do not shift the next batch's), where racing backups would train the fast draws of the slow
    episodes' backups instead. With a keyed policy (`keyed_sampling`) a replica may race, but it draws what
    its original drew: the same rewards, place by place."""
    ids = [chat_tokenizer.encode(word, add_special_tokens=False) for word in ("Left", "Right")]

    def batch_with(backup_after_s):
        scheduler = scheduler_factory(
            EnvLayout(8, 2, ("A",), (8,), max_env_num_per_worker=16),  # 4 groups a batch, 4 idle for backups
            CoinPolicy(*ids),
            env_factory=lambda _type, _config: ChoiceEnv(slow_s=0.4),
            limits=EnvCallLimits(16, TIMEOUT_S, max_hung_env_calls=32, backup_after_s=backup_after_s),
            settings=SchedulerSettings(keyed_sampling=keyed),
        )
        batches = run_batches(scheduler, (8, None), (8, None))
        assert sum(scheduler.ledger.total.values()) == scheduler.dispatched
        return [t for b in batches for t in b.trajectories], batches, scheduler.ledger.total

    def episodes(trajs):  # a raced replica has its own slot and id
        return sorted(
            (t.group_id, t.score) if keyed else (t.group_id, t.env_id, t.episode_id, t.score) for t in trajs
        )

    off, _, _ = batch_with(0.0)
    on, batches, ledger = batch_with(0.05)
    backups = sum(b.metrics["rollout/backup_episodes"] for b in batches)
    assert {t.score for t in off} == {0.0, 1.0}  # both actions drawn
    assert backups >= 1  # the slow episodes were backed up
    mean = {name: sum(t.score for t in trajs) / len(trajs) for name, trajs in (("on", on), ("off", off))}
    assert episodes(on) == episodes(off), f"mean reward with backups {mean['on']}, without {mean['off']}"
    assert ledger["straggler"] + ledger["cancelled"] == backups  # a backup or, raced, its original unused


def test_a_place_trains_its_first_attempt_that_did_not_fail():
    """`Attempts.trained`: dispatch order decides, not which attempt ended first."""
    original, backup = (Trajectory(e, 0, e, "A", 1) for e in (0, 1))
    attempts = Attempts([0, 1], {1: backup})
    assert attempts.trained() is None and not attempts.all_failed  # the original still runs: it decides
    attempts.ended[0] = original
    assert attempts.trained() is original and attempts.unused(original) == ([], 1)
    attempts.ended[0] = None  # the original failed: its backup takes its place
    assert attempts.trained() is backup
    attempts.ended[1] = None
    assert attempts.trained() is None and attempts.all_failed  # every attempt failed: the place replays


def test_no_backups_when_turned_off(scheduler_factory, answer_ids, release):
    limits = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=0.5, backup_after_s=0.0)
    scheduler = scheduler_factory(
        EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4),
        ScriptedPolicy(answer_ids),
        env_factory=first_env_hangs(release),
        limits=limits,
        settings=SchedulerSettings(max_failures_per_group=4),
    )
    (batch,) = run_batches(scheduler, (4, None))
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
