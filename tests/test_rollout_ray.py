"""The rollout under Ray: env workers are actors; a killed actor and truly hung env threads."""

from __future__ import annotations

import asyncio
from collections import Counter

import msgpack
import pytest
from roll_rollout import (
    EnvCallLimits,
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    RolloutScheduler,
    SamplingSettings,
    SchedulerSettings,
    WorkerLink,
)
from roll_rollout.testing import FaultyCountdownFactory, ScriptedPolicy, countdown_factory

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def tokenizer():
    from roll_pipeline.models.cache import resolve_pretrain
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_pretrain("builtin:tiny-frozen-lake"))


def ray_spawner(ray, layout, tokenizer, policy, env_factory, limits, actors):
    remote_worker = ray.remote(EnvWorker).options(num_cpus=0)

    def spawn(w):
        slots = [EnvSlotSpec(e, "A", "countdown", max_turns=8) for e in layout.env_ids_of_worker(w)]
        actor = remote_worker.remote(slots, tokenizer, policy, env_factory=env_factory, limits=limits)
        actors.append((w, actor))
        return WorkerLink(
            lambda p: actor.submit.remote(p),
            lambda p: actor.cancel.remote(p),
            lambda wait: actor.poll.remote(wait),
            lambda: ray.kill(actor),
        )

    return spawn


def test_a_killed_env_worker_actor_is_restarted_and_the_batch_delivered(ray_session, tokenizer):
    ray = ray_session
    layout = EnvLayout(4, 4, ("A",), (4,), max_env_num_per_worker=8)
    policy = ScriptedPolicy(
        tokenizer.encode("<answer>Up</answer>", add_special_tokens=False), latency=lambda r: 0.05
    )
    actors = []
    spawn = ray_spawner(
        ray, layout, tokenizer, policy, countdown_factory(min_turns=4), EnvCallLimits(), actors
    )
    scheduler = RolloutScheduler(layout, spawn, {"A": SamplingSettings(max_new_tokens=8)})

    async def scenario():
        batch_task = asyncio.get_running_loop().create_task(scheduler.get_batch(16))
        await asyncio.sleep(1.0)  # episodes are mid-way (4 turns x 50 ms after the actors started)
        ray.kill(actors[0][1])
        batch = await batch_task
        await scheduler.stop()
        return batch

    batch = asyncio.run(scenario())
    assert len(batch) == 16 and all(t.error is None and t.turns for t in batch.trajectories)
    assert batch.metrics["rollout/env_worker_restarts"] >= 1
    assert [w for w, _ in actors].count(0) >= 2  # worker 0 was spawned again
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched


def test_truly_hung_env_threads_are_freed_by_recycling_the_actor(ray_session, tokenizer):
    ray = ray_session
    layout = EnvLayout(2, 4, ("A",), (2,), max_env_num_per_worker=8)
    policy = ScriptedPolicy(tokenizer.encode("<answer>Up</answer>", add_special_tokens=False))
    limits = EnvCallLimits(max_env_step_concurrent=4, env_step_timeout_s=0.3, max_hung_env_calls=2)
    fresh = ray.remote(EnvWorker).options(num_cpus=0).remote([], tokenizer, policy)
    baseline = msgpack.unpackb(ray.get(fresh.poll.remote(0.0)))["stats"]["threads"]
    ray.kill(fresh)
    actors = []
    factory = FaultyCountdownFactory(p_raise=0.0, p_hang=0.03, min_turns=3, seed=3)
    spawn = ray_spawner(ray, layout, tokenizer, policy, factory, limits, actors)
    scheduler = RolloutScheduler(
        layout,
        spawn,
        {"A": SamplingSettings(max_new_tokens=8)},
        settings=SchedulerSettings(max_failures_per_group=50, max_worker_restarts=50),
    )

    async def scenario():
        # hangs are drawn per process (the factory salts its seed with the pid), about 0.03 per env step, so
        # how many batches it takes to hang twice varies: collect until two timed out and the worker was
        # recycled (usually 3-8 batches)
        batches = []
        while len(batches) < 40:
            batches.append(await scheduler.get_batch(8))
            total = Counter()
            for b in batches:
                total.update({k: v for k, v in b.metrics.items() if k.startswith("rollout/env_")})
            if total["rollout/env_timeouts"] >= 2 and total["rollout/env_worker_recycles"] >= 1:
                break
        await scheduler.stop()
        return batches

    batches = asyncio.run(scenario())
    metrics = [b.metrics for b in batches]
    assert all(len(b) == 8 for b in batches)
    timeouts = sum(m.get("rollout/env_timeouts", 0) for m in metrics)
    recycles = sum(m.get("rollout/env_worker_recycles", 0) for m in metrics)
    assert timeouts >= 2 and recycles >= 1
    # a worker never holds more than its pool (4 + 2 spare threads) beyond a fresh worker's threads
    peak = max(m["rollout/env_worker_threads_max"] for m in metrics)
    assert peak <= baseline + 4 + 2
