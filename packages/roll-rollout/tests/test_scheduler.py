"""The scheduler and env workers, in-process, on scripted envs and policies (no Ray, no model)."""

from __future__ import annotations

import asyncio

import pytest
from roll_rollout import EnvLayout, SchedulerError, SchedulerSettings, first_training_seeds, validation_seeds
from roll_rollout.testing import CountdownEnv, ScriptedPolicy, countdown_factory


def run(coro):
    return asyncio.run(coro)


async def one_batch(scheduler, n, **kwargs):
    try:
        return await scheduler.get_batch(n, **kwargs)
    finally:
        await scheduler.stop()


def test_get_batch_returns_whole_groups_sharing_a_seed(scheduler_factory, answer_ids):
    layout = EnvLayout(4, 3, ("A", "B"), (3, 1), max_env_num_per_worker=5)
    assert layout.num_workers == 3
    policy = ScriptedPolicy(answer_ids)
    scheduler = scheduler_factory(layout, policy, seed=3)
    batch = run(one_batch(scheduler, 12))
    trajs = batch.trajectories
    assert sorted(t.env_id for t in trajs) == list(range(12))
    for g in range(4):
        group = [t for t in trajs if layout.group_of_env(t.env_id) == g]
        assert len(group) == 3 and len({t.seed for t in group}) == 1 and len({t.group_id for t in group}) == 1
        assert {t.tag for t in group} == {"A" if g < 3 else "B"}
        for t in group:  # CountdownEnv: 1 + seed % 3 steps, success at the end
            assert len(t.turns) == 1 + t.seed % 3 and t.success and t.terminated
            assert t.metrics["num_actions"] == len(t.turns)
    assert policy.requests == sum(len(t.turns) for t in trajs)
    assert all(s < validation_seeds(1)[0] for s in scheduler.next_seeds(5))


def test_sync_mode_is_idle_between_batches_and_async_mode_is_not(scheduler_factory, answer_ids):
    async def requests_during_training(ratio):
        layout = EnvLayout(2, 2, ("A",), (2,), 4)
        policy = ScriptedPolicy(answer_ids, latency=lambda r: 0.002)
        scheduler = scheduler_factory(
            layout, policy, settings=SchedulerSettings(async_generation_ratio=ratio)
        )
        await scheduler.get_batch(4)
        before = policy.requests
        await asyncio.sleep(0.2)
        during = policy.requests - before
        queued = len(await scheduler.get_batch(4))
        await scheduler.stop()
        return during, queued

    during_sync, _ = run(requests_during_training(0))
    during_async, queued = run(requests_during_training(1))
    assert during_sync == 0
    assert during_async > 0 and queued == 4


def test_stale_groups_are_dropped_and_counted(scheduler_factory, answer_ids):
    async def scenario():
        layout = EnvLayout(2, 2, ("A",), (2,), 4)
        policy = ScriptedPolicy(answer_ids)
        scheduler = scheduler_factory(layout, policy, settings=SchedulerSettings(async_generation_ratio=1))
        await scheduler.get_batch(4)
        await asyncio.sleep(0.2)  # the next batch is generated at version 0
        policy.version = 5
        scheduler.set_policy_version(5)  # five updates later, those groups are 5 versions old
        batch = await scheduler.get_batch(4)
        await scheduler.stop()
        return batch

    batch = run(scenario())
    assert batch.metrics["rollout/stale_groups"] >= 1 and batch.metrics["rollout/stale_episodes"] >= 2
    assert all(turn.policy_version >= 4 for t in batch.trajectories for turn in t.turns)


def test_explicit_seeds_play_each_seed_once(scheduler_factory, answer_ids):
    layout = EnvLayout(4, 1, ("A", "B"), (2, 2), 8)
    seeds = validation_seeds(6)
    scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids))

    async def twice():
        first = await scheduler.get_batch(6, seeds=seeds)
        second = await scheduler.get_batch(6, seeds=seeds)
        await scheduler.stop()
        return first, second

    first, second = run(twice())
    for batch in (first, second):
        assert sorted(t.seed for t in batch.trajectories) == seeds
        assert [t.tag for t in batch.trajectories].count("A") == 3


def test_a_broken_slot_is_replayed_and_redundancy_completes_its_groups(scheduler_factory, answer_ids):
    # every third env made is broken: its replacement (made after it fails) may be broken again, so
    # failures keep coming whatever the timing (a cancelled straggler never reaches its failing step)

    class SlotEnv(CountdownEnv):
        pass

    made = iter(range(10_000))

    def factory(_type, _config):
        env = SlotEnv()
        env.slot = next(made)
        return env

    def step(self, action):
        if getattr(self, "slot", 0) % 3 == 1:
            raise RuntimeError("broken slot")
        return CountdownEnv.step(self, action)

    SlotEnv.step = step
    layout = EnvLayout(2, 2, ("A",), (2,), 6, group_size_redundancy=1)
    scheduler = scheduler_factory(
        layout,
        ScriptedPolicy(answer_ids),
        env_factory=factory,
        settings=SchedulerSettings(max_failures_per_group=8),
    )

    async def until_a_failure_is_reported():
        # A failure reaches the batch that is being collected when it ends; on a loaded machine the healthy
        # slots can complete the first batch's groups before a broken slot's first step has run.
        failed = []
        try:
            for _ in range(8):
                batch = await scheduler.get_batch(4)
                assert len(batch) == 4 and all(t.error is None for t in batch.trajectories)
                assert batch.metrics["rollout/failed_episodes"] == len(batch.failed)
                failed += batch.failed
                if failed:
                    return failed
        finally:
            await scheduler.stop()
        return failed

    failed = run(until_a_failure_is_reported())
    assert failed and all(t.error.startswith("env_error: ") for t in failed)
    assert all("broken slot" in t.error for t in failed)


def test_every_env_failing_raises_a_clear_error_instead_of_hanging(scheduler_factory, answer_ids):
    class Broken(CountdownEnv):
        def step(self, action):
            raise ValueError("this env is broken")

    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    scheduler = scheduler_factory(
        layout,
        ScriptedPolicy(answer_ids),
        env_factory=lambda t, c: Broken(),
        settings=SchedulerSettings(max_failures_per_group=1, max_consecutive_given_up=4),
    )
    with pytest.raises(SchedulerError, match=r"every env seems to be failing.*this env is broken"):
        run(one_batch(scheduler, 4))
    ledger = scheduler.ledger.total
    assert sum(ledger.values()) == scheduler.dispatched and ledger["failed"] >= 8


def test_a_policy_that_never_answers_hits_the_batch_timeout(scheduler_factory, answer_ids):
    class Silent:
        async def generate(self, request):
            await asyncio.Event().wait()

    layout = EnvLayout(1, 2, ("A",), (1,), 2)
    scheduler = scheduler_factory(layout, Silent(), settings=SchedulerSettings(batch_timeout_s=0.3))
    with pytest.raises(SchedulerError, match=r"no batch within batch_timeout_s=0.3 s.*running 1"):
        run(one_batch(scheduler, 2))


def test_a_failing_policy_fails_episodes_not_the_rollout(scheduler_factory, answer_ids):
    class Flaky(ScriptedPolicy):
        async def generate(self, request):
            self.requests += 1
            if self.requests % 3 == 0:
                raise ConnectionError("inference server went away")
            return await super().generate(request)

    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    scheduler = scheduler_factory(
        layout, Flaky(answer_ids), settings=SchedulerSettings(max_failures_per_group=20)
    )
    batch = run(one_batch(scheduler, 4))
    assert len(batch) == 4 and batch.failed
    assert all(t.error.startswith("policy_error: ConnectionError") for t in batch.failed)


def test_a_dying_worker_link_is_restarted_and_its_episodes_replayed(chat_tokenizer, answer_ids):
    from roll_rollout import EnvSlotSpec, EnvWorker, RolloutScheduler, SamplingSettings, WorkerLink

    layout = EnvLayout(2, 2, ("A",), (2,), 2)
    policy = ScriptedPolicy(answer_ids, latency=lambda r: 0.01)
    spawned = []

    def spawn(w):
        slots = [EnvSlotSpec(e, "A", "countdown") for e in layout.env_ids_of_worker(w)]
        worker = EnvWorker(slots, chat_tokenizer, policy, env_factory=countdown_factory(min_turns=3))
        link = WorkerLink.in_process(worker)
        spawned.append(w)
        if len(spawned) == 1:  # the first worker dies at its first poll, its two episodes running
            polls = iter(range(100))

            async def dying_poll(wait):
                if next(polls) == 0:
                    worker.close()
                    raise ConnectionError("actor died")
                return await worker.poll(wait)

            link.poll = dying_poll
        return link

    scheduler = RolloutScheduler(layout, spawn, {"A": SamplingSettings(max_new_tokens=4)})
    batch = run(one_batch(scheduler, 4))
    assert len(batch) == 4 and spawned.count(0) == 2
    assert batch.metrics["rollout/env_worker_restarts"] == 1 and batch.metrics["rollout/lost_episodes"] == 2
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_first_training_seeds_are_the_seeds_a_scheduler_draws_first(scheduler_factory, answer_ids):
    """What `roll train` compares its validation episodes with: the seeds its training scheduler plays."""
    layout = EnvLayout(2, 2, ("A", "B"), (1, 1), 4)
    scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids), seed=7)
    assert scheduler.next_seeds(3) + scheduler.next_seeds(2) == first_training_seeds(7, 5)
    assert first_training_seeds(7, 5) != first_training_seeds(8, 5)


def test_rng_state_round_trips_and_rejects_garbage(scheduler_factory, answer_ids):
    layout = EnvLayout(2, 2, ("A", "B"), (1, 1), 4)
    scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids))
    state = scheduler.rng_state()
    first = scheduler.next_seeds(3)
    scheduler.set_rng_state(state)
    assert scheduler.next_seeds(3) == first
    for bad in (
        None,
        [1, 2, 3],
        {**state, "rng": [1, 2]},
        {**state, "episodes": -1},
        {**state, "groups": True},
        {**state, "next_group": {"A": -1, "B": 0}},
        {**state, "next_group": {"A": 0}},
        {**state, "surprise": 1},
    ):
        with pytest.raises(SchedulerError, match="set_rng_state"):
            scheduler.set_rng_state(bad)
    assert scheduler.next_seeds(3) != first  # the failed calls changed nothing
    scheduler.set_rng_state({k: v for k, v in state.items() if k != "next_group"})  # an older checkpoint
    assert scheduler.next_seeds(3) == first


def test_layout_and_batch_errors(scheduler_factory, answer_ids):
    with pytest.raises(SchedulerError, match="sums to"):
        EnvLayout(4, 2, ("A",), (3,), 4)
    with pytest.raises(SchedulerError, match="same length"):
        EnvLayout(4, 2, ("A", "B"), (4,), 4)
    with pytest.raises(SchedulerError, match="repeat"):
        EnvLayout(4, 2, ("A", "A"), (2, 2), 4)
    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids))
    with pytest.raises(SchedulerError, match="multiple of"):
        run(scheduler.get_batch(3))
    with pytest.raises(SchedulerError, match="3 seeds for 2 groups"):
        run(scheduler.get_batch(4, seeds=[1, 2, 3]))
    asynchronous = scheduler_factory(
        layout, ScriptedPolicy(answer_ids), settings=SchedulerSettings(async_generation_ratio=1)
    )
    with pytest.raises(SchedulerError, match="synchronous mode"):
        run(asynchronous.get_batch(2, seeds=[1]))
    with pytest.raises(SchedulerError, match="filter_keep_fraction"):
        SchedulerSettings(filter_keep_fraction=0)


def test_a_bug_while_collecting_results_fails_get_batch_instead_of_stalling(scheduler_factory, answer_ids):
    layout = EnvLayout(1, 2, ("A",), (1,), 2)
    scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids))

    def broken(w, traj):
        raise KeyError("bookkeeping bug")

    scheduler._on_finished = broken
    with pytest.raises(SchedulerError, match="internal error while handling the results of env worker 0"):
        run(one_batch(scheduler, 2))


class KeyRecorder(ScriptedPolicy):
    """A scripted policy that records the sample key of every request."""

    def __init__(self, response_ids):
        super().__init__(response_ids)
        self.keys = []

    async def generate(self, request):
        self.keys.append(request.sample_key)
        return await super().generate(request)


def test_every_turn_asks_with_its_own_sample_key(scheduler_factory, answer_ids):
    from roll_rollout import sample_key

    policy = KeyRecorder(answer_ids)
    batch = run(one_batch(scheduler_factory(EnvLayout(2, 2, ("A",), (2,), 4), policy), 4))
    expected = [
        sample_key(t.seed, t.env_id, t.episode_id, turn)
        for t in batch.trajectories
        for turn in range(len(t.turns))
    ]
    assert sorted(policy.keys) == sorted(expected) and len(set(expected)) == len(expected)


def _plays(batch):
    return [(t.seed, t.env_id, t.episode_id, t.group_id) for t in batch.trajectories]


def test_a_restored_scheduler_plays_the_same_seeds_on_the_same_slots(scheduler_factory, answer_ids):
    layout = EnvLayout(3, 2, ("A",), (3,), 6)  # 2 of the 3 groups play each batch: the cursor moves

    async def two_batches(state=None):
        scheduler = scheduler_factory(layout, ScriptedPolicy(answer_ids), seed=5)
        try:
            if state is None:
                first = await scheduler.get_batch(4)
                saved = scheduler.rng_state()
            else:
                scheduler.set_rng_state(state)
                first, saved = None, state
            return first, saved, await scheduler.get_batch(4)
        finally:
            await scheduler.stop()

    _, saved, second = run(two_batches())
    assert saved["next_group"] == {"A": 2}
    _, _, replayed = run(two_batches(saved))
    assert _plays(replayed) == _plays(second)
    _, _, without_cursor = run(two_batches({k: v for k, v in saved.items() if k != "next_group"}))
    assert _plays(without_cursor) != _plays(second)  # an older checkpoint restarts the cursor: other slots


def test_batches_hold_groups_in_creation_order_not_completion_order(scheduler_factory, answer_ids):
    slow_first = ScriptedPolicy(answer_ids, latency=lambda r: 0.05 if r.sample_key % 2 else 0.0)
    batch = run(one_batch(scheduler_factory(EnvLayout(4, 2, ("A",), (4,), 8), slow_first), 8))
    groups = [t.group_id for t in batch.trajectories]
    assert groups == sorted(groups)


class _TemperatureLog(ScriptedPolicy):
    """Records the temperature of every request and the episode it belongs to."""

    def __init__(self, response_ids):
        super().__init__(response_ids, latency=lambda r: 0.001)
        self.temperatures: list[float] = []

    async def generate(self, request):
        self.temperatures.append(request.sampling.temperature)
        return await super().generate(request)


def test_set_sampling_applies_to_episodes_dispatched_after_it(scheduler_factory, answer_ids):
    from roll_rollout import SamplingSettings

    async def scenario():
        layout = EnvLayout(2, 2, ("A",), (2,), 4)
        policy = _TemperatureLog(answer_ids)
        scheduler = scheduler_factory(layout, policy)
        first = await scheduler.get_batch(4)
        n_first = len(policy.temperatures)
        scheduler.set_sampling({"A": SamplingSettings(max_new_tokens=4, temperature=1.5)})
        second = await scheduler.get_batch(4)
        with pytest.raises(SchedulerError, match="exactly the tags"):
            scheduler.set_sampling({"B": SamplingSettings(max_new_tokens=4)})
        await scheduler.stop()
        return first, second, n_first, policy.temperatures

    first, second, n_first, temperatures = run(scenario())
    # synchronous mode: nothing runs between batches, so the switch is exact
    assert n_first == sum(len(t.turns) for t in first.trajectories)
    assert set(temperatures[:n_first]) == {1.0}
    assert temperatures[n_first:] == [1.5] * sum(len(t.turns) for t in second.trajectories)
