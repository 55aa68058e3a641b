"""The scheduler's parts on their own: `SeedStream` (what checkpoints save) and `RolloutMetrics`."""

from __future__ import annotations

import random

import pytest
import roll_rollout
from roll_rollout import EnvLayout, SchedulerError, Trajectory, Turn
from roll_rollout.plan.seeds import VALIDATION_SEED_BASE, SeedStream
from roll_rollout.scheduling.groups import Ledger
from roll_rollout.scheduling.rollout_metrics import COUNTED, RolloutMetrics


def test_public_names_import_from_where_they_were():
    from roll_rollout.scheduling.scheduler import RolloutScheduler, SchedulerSettings

    assert RolloutScheduler is roll_rollout.RolloutScheduler
    assert SchedulerSettings is roll_rollout.SchedulerSettings


def test_seed_stream_draws_the_seed_stream_of_random_random():
    seeds = SeedStream(EnvLayout(2, 2, ("A",), (2,), 4), seed=7)
    reference = random.Random(7)
    assert seeds.training_seeds(5) == [reference.randrange(0, VALIDATION_SEED_BASE) for _ in range(5)]


def test_seed_stream_state_round_trips_and_bad_state_changes_nothing():
    layout = EnvLayout(4, 2, ("A", "B"), (3, 1), 4)
    seeds = SeedStream(layout, seed=3)
    seeds.training_seeds(2)
    assert (seeds.new_episode_id(), seeds.new_group_key(), seeds.mix.split(4)) == (0, 0, {"A": 3, "B": 1})
    assert seeds.idle_group("A", busy={0}) == 1
    state = seeds.state()
    after = (
        seeds.training_seeds(3),
        seeds.new_episode_id(),
        seeds.new_group_key(),
        seeds.idle_group("A", ()),
    )
    with pytest.raises(SchedulerError, match="set_rng_state"):
        seeds.set_state({**state, "episodes": -1})
    seeds.set_state(state)
    again = (
        seeds.training_seeds(3),
        seeds.new_episode_id(),
        seeds.new_group_key(),
        seeds.idle_group("A", ()),
    )
    assert again == after and after[1:3] == (1, 1) and after[3] == 2
    assert seeds.state()["tag_mix"] == state["tag_mix"]


def _traj(versions: list[int], error: str | None = None) -> Trajectory:
    turns = [Turn([1], [2], [-0.5], 1.0, True, True, "s", policy_version=v) for v in versions]
    return Trajectory(0, 0, 0, "A", 1, turns, error=error)


def test_rollout_metrics_have_the_same_keys_every_batch_and_reset():
    metrics, ledger = RolloutMetrics(), Ledger()
    failed = _traj([3], error="env_error: boom")
    metrics.note_failure(failed, "env_error")
    metrics.count("rollout/stale_groups", 2)
    metrics.note_stats(0, {"hung_env_calls": 1, "threads": 4})
    metrics.note_stats(1, {"hung_env_calls": 2, "threads": 3})
    ledger.add("failed")
    assert metrics.last_failure == "env_error: boom"
    assert metrics.take_failed() == [failed] and metrics.take_failed() == []
    first = metrics.take(ledger, [_traj([3, 5])], policy_version=5, queued_groups=2, running_groups=1)
    assert first["rollout/env_errors"] == 1 and first["rollout/stale_groups"] == 2
    assert first["rollout/failed_episodes"] == 1 and first["rollout/queued_groups"] == 2
    assert first["rollout/hung_env_calls"] == 3 and first["rollout/env_worker_threads_max"] == 4
    assert first["rollout/staleness/mean"] == 1 and first["rollout/staleness/max"] == 2
    second = metrics.take(ledger, [], policy_version=5, queued_groups=0, running_groups=0)
    assert set(COUNTED) <= set(second) and set(second) == set(first) - {
        "rollout/staleness/mean",
        "rollout/staleness/max",
    }
    assert all(second[k] == 0 for k in COUNTED) and second["rollout/failed_episodes"] == 0


def test_rollout_metrics_count_valid_refused_and_unparsable_turns():
    flags = [(True, False), (True, True), (False, False), (False, True), (True, False), (True, True)]
    turns = [
        Turn([1], [2], [-0.5], 0.0, valid, True, "s", action_is_refused=refused) for valid, refused in flags
    ]
    trajs = [Trajectory(0, 0, 0, "A", 1, turns[:4]), Trajectory(1, 0, 1, "A", 1, turns[4:])]
    metrics = RolloutMetrics().take(Ledger(), trajs, policy_version=0, queued_groups=0, running_groups=0)
    # read and applied: turns 0 and 4; refused: 1 and 5; not read (refused or not): 2 and 3
    assert metrics["rollout/valid_turns"] == 2.0
    assert metrics["rollout/refused_turns"] == 2.0
    assert metrics["rollout/unparsable_turns"] == 2.0
    empty = RolloutMetrics().take(Ledger(), [], policy_version=0, queued_groups=0, running_groups=0)
    assert (
        empty["rollout/valid_turns"]
        == empty["rollout/refused_turns"]
        == empty["rollout/unparsable_turns"]
        == 0
    )
