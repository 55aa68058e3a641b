"""Fault injection: envs that raise and hang; the batches still come, and every fault is counted."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest
from roll_rollout import EnvCallLimits, EnvLayout, SchedulerSettings, failure_kind
from roll_rollout.testing import CountdownEnv, FaultyEnv, ScriptedPolicy


def rss_mb() -> float:
    """Resident memory of this process (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


@pytest.mark.timeout(300)
def test_5pct_raising_and_1pct_hanging_steps_512_trajectories(scheduler_factory, answer_ids, release):
    injected: Counter[str] = Counter()
    lock = threading.Lock()

    def record(kind):
        with lock:
            injected[kind] += 1

    made = iter(range(100_000))

    def factory(_type, _config):
        return FaultyEnv(
            CountdownEnv(min_turns=2, spread=4), 0.05, 0.01, seed=next(made), record=record, release=release
        )

    layout = EnvLayout(16, 8, ("A",), (16,), max_env_num_per_worker=32)
    scheduler = scheduler_factory(
        layout,
        ScriptedPolicy(answer_ids),
        env_factory=factory,
        # 3 s: long enough that a healthy step never times out even at load 15 on 2 cores, so counts are exact
        limits=EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=3.0, max_hung_env_calls=48),
        settings=SchedulerSettings(max_failures_per_group=32),
    )
    threads_before = threading.active_count()

    async def scenario():
        batches, memory = [], []
        for _ in range(4):
            batches.append(await scheduler.get_batch(128))
            memory.append(rss_mb())
        peak_threads = max(b.metrics["rollout/env_worker_threads_max"] for b in batches)
        await scheduler.stop()
        return batches, memory, peak_threads

    batches, memory, peak_threads = asyncio.run(scenario())
    trajs = [t for b in batches for t in b.trajectories]
    failed = [t for b in batches for t in b.failed]
    assert len(trajs) == 512 and len({t.episode_id for t in trajs}) == 512
    assert all(t.error is None for t in trajs)
    kinds = Counter(failure_kind(t) for t in failed)
    assert injected["raise"] > 50 and injected["hang"] > 5  # the injection really happened
    report = f"injected {dict(injected)}, counted {dict(kinds)}, ledger {dict(scheduler.ledger.total)}"
    assert kinds["env_error"] == injected["raise"], report
    assert kinds["env_timeout"] == injected["hang"], report
    assert sum(b.metrics["rollout/failed_episodes"] for b in batches) == len(failed)
    ledger = scheduler.ledger.total
    assert sum(ledger.values()) == scheduler.dispatched and ledger["failed"] == len(failed)
    # threads: each worker's pool (8 + 48 spare) at most; memory: no growth with the number of batches
    assert peak_threads <= threads_before + layout.num_workers * (8 + 48)
    assert memory[-1] - memory[0] < 50


@pytest.mark.timeout(120)
def test_hung_calls_get_the_worker_recycled_and_the_batch_still_comes(scheduler_factory, answer_ids, release):
    hangs = Counter()
    made = iter(range(100_000))

    # The first worker's 4 envs hang on every step, later envs never: the recycle is certain, not a draw
    # (a 20% hang rate let a batch of 4 finish with one hang, depending on the tests run before).
    def factory(_type, _config):
        p_hang = 1.0 if next(made) < 4 else 0.0
        return FaultyEnv(
            CountdownEnv(min_turns=3),
            0.0,
            p_hang,
            seed=1,
            record=lambda kind: hangs.update([kind]),
            release=release,
        )

    layout = EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4)
    scheduler = scheduler_factory(
        layout,
        ScriptedPolicy(answer_ids),
        env_factory=factory,
        limits=EnvCallLimits(max_env_step_concurrent=4, env_step_timeout_s=0.05, max_hung_env_calls=2),
        settings=SchedulerSettings(max_failures_per_group=100, max_worker_restarts=100),
    )

    async def scenario():
        batch = await scheduler.get_batch(4)
        await scheduler.stop()
        return batch

    batch = asyncio.run(scenario())
    assert len(batch) == 4 and all(t.error is None for t in batch.trajectories)
    assert batch.metrics["rollout/env_worker_recycles"] >= 1
    assert hangs["hang"] >= 2  # the recycle answered hung calls, not something else
    assert sum(scheduler.ledger.total.values()) == scheduler.dispatched
