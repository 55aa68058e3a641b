"""`EnvCalls`: env calls in a bounded pool, under a timeout, with hung threads counted."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import time

import pytest
from roll_envs import EnvRandomState
from roll_rollout import EnvCallError, EnvCalls, EnvCallTimeout
from roll_rollout.hosting.call_pace import (
    INLINE_OPT_IN_S,
    INLINE_REVOKE_S,
    REVOKE_AFTER,
    REVOKE_SHARE,
    InlineGrant,
)
from roll_rollout.hosting.env_calls import DaemonThreadPool


def test_a_call_returns_its_value_and_an_error_keeps_its_cause():
    calls = EnvCalls(max_concurrent=2, timeout_s=5)

    def boom():
        raise KeyError("bad state")

    async def scenario():
        assert await calls.run(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(EnvCallError, match="step raised KeyError") as info:
            await calls.run(boom, what="step")
        return info.value

    error = asyncio.run(scenario())
    assert isinstance(error.__cause__, KeyError)
    calls.shutdown()


def test_a_hung_call_times_out_and_is_counted_until_it_returns():
    calls = EnvCalls(max_concurrent=2, timeout_s=1.0, max_hung=2)
    release = threading.Event()

    async def scenario():
        with pytest.raises(EnvCallTimeout, match=r"env_step_timeout_s=1 s"):
            await calls.run(release.wait, what="step")
        assert calls.hung == 1 and not calls.needs_recycle
        with pytest.raises(EnvCallTimeout):
            await calls.run(release.wait)
        assert calls.hung == 2 and calls.needs_recycle
        # the spare threads keep healthy calls going while two threads hang
        assert await asyncio.gather(*(calls.run(time.sleep, 0.01) for _ in range(4))) == [None] * 4
        release.set()
        for _ in range(100):
            if calls.hung == 0:
                break
            await asyncio.sleep(0.01)
        return calls.hung

    try:
        assert asyncio.run(scenario()) == 0
    finally:
        release.set()  # a failed assertion must not leave a thread that blocks the interpreter's exit
        calls.shutdown()


def test_at_most_max_concurrent_calls_run_at_once():
    calls = EnvCalls(max_concurrent=3, timeout_s=5)
    running, peak, lock = [0], [0], threading.Lock()

    def work():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1

    async def scenario():
        await asyncio.gather(*(calls.run(work) for _ in range(20)))

    asyncio.run(scenario())
    assert peak[0] == 3
    calls.shutdown()


def test_a_cancelled_call_counts_as_hung_while_its_thread_runs():
    calls = EnvCalls(max_concurrent=1, timeout_s=5)
    release = threading.Event()

    async def scenario():
        task = asyncio.get_running_loop().create_task(calls.run(release.wait))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        hung_while_blocked = calls.hung
        release.set()
        for _ in range(500):  # the thread returns as soon as it is scheduled
            if calls.hung == 0:
                break
            await asyncio.sleep(0.01)
        return hung_while_blocked, calls.hung

    try:
        assert asyncio.run(scenario()) == (1, 0)
    finally:
        release.set()
        calls.shutdown()


def test_bad_limits_are_rejected():
    with pytest.raises(ValueError, match="max_concurrent >= 1"):
        EnvCalls(max_concurrent=0)
    with pytest.raises(ValueError, match="timeout_s > 0"):
        EnvCalls(timeout_s=0)


def test_the_pool_reuses_threads_and_reports_errors():
    pool = DaemonThreadPool(2, name="t")
    assert [pool.submit(pow, 2, k).result(timeout=10) for k in range(20)] == [2**k for k in range(20)]
    assert len(pool._threads) == 1  # sequential calls reuse the idle thread
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(timeout=10)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(pow, 2, 2)


HUNG_ENV_SCRIPT = """
import asyncio, threading
from roll_rollout import EnvCalls, EnvCallTimeout

async def main():
    calls = EnvCalls(max_concurrent=1, timeout_s=0.2, max_hung=1)
    try:
        await calls.run(threading.Event().wait, what="env.step")  # never returns
    except EnvCallTimeout:
        print("timed out", flush=True)

asyncio.run(main())
"""


def test_a_hung_env_thread_does_not_keep_the_process_alive():
    # ThreadPoolExecutor joins its threads at exit: this process would never end.
    done = subprocess.run(
        [sys.executable, "-c", HUNG_ENV_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timed out"


def test_an_env_raising_timeout_error_is_an_env_error_not_a_timeout():
    calls = EnvCalls(max_concurrent=1, timeout_s=5)

    def socket_timeout():
        raise TimeoutError("the env's own server did not answer")

    async def scenario():
        with pytest.raises(EnvCallError, match="raised TimeoutError") as info:
            await calls.run(socket_timeout, what="step")
        assert not isinstance(info.value, EnvCallTimeout) and calls.hung == 0
        with pytest.raises(EnvCallError, match="raised TimeoutError"):
            await calls.run(socket_timeout, random_state=EnvRandomState())

    asyncio.run(scenario())
    calls.shutdown()


def test_isolated_calls_are_timed_from_the_lock_and_a_hung_one_gives_it_back():
    """A hung isolated call holds the process-wide lock until its timeout (1 s, in another worker's
    `EnvCalls`), then gives it back; the calls that waited behind it run then, and are not timed out
    although they waited longer than their own timeout_s (0.3 s)."""
    slow = EnvCalls(max_concurrent=1, timeout_s=1.0, max_hung=1)
    calls = EnvCalls(max_concurrent=4, timeout_s=0.3, max_hung=2)
    release = threading.Event()
    entered = threading.Event()

    def hang():
        entered.set()
        release.wait()

    async def scenario():
        hung = asyncio.ensure_future(slow.run(hang, random_state=EnvRandomState(), what="step"))
        while not entered.is_set():
            await asyncio.sleep(0.005)
        started = time.monotonic()
        waiting = [calls.run(random.random, random_state=EnvRandomState(i)) for i in range(3)]
        results = await asyncio.gather(*waiting)
        with pytest.raises(EnvCallTimeout):
            await hung
        assert calls.hung == 0 and slow.hung == 1  # only the hung call counts as hung
        return results, time.monotonic() - started

    random.seed(5)
    process = random.getstate()
    try:
        results, waited = asyncio.run(scenario())
    finally:
        release.set()
        calls.shutdown()
        slow.shutdown()
    assert results == [random.Random(i).random() for i in range(3)]  # each under its own state
    assert 0.8 < waited < 5  # they waited for the hung call's timeout, and were not timed out themselves
    assert random.getstate() == process  # the process's own state is back


def test_paced_calls_run_inline_while_fast_and_go_back_to_the_pool_after_a_slow_one():
    calls = EnvCalls(max_concurrent=2, timeout_s=5, inline_below_s=0.002)
    pace = calls.pace()

    async def scenario():
        loop_thread = threading.get_ident()
        where = [await calls.run_paced(pace, threading.get_ident) for _ in range(3)]
        assert where[0] != loop_thread and where[1:] == [loop_thread] * 2  # first call timed in the pool
        await calls.run_paced(pace, time.sleep, 0.005)  # inline, too slow (not INLINE_REVOKE_S): it hops
        assert await calls.run_paced(pace, threading.get_ident) != loop_thread
        assert await calls.run_paced(pace, threading.get_ident) == loop_thread
        with pytest.raises(EnvCallError, match="step raised KeyError") as raised:
            await calls.run_paced(pace, {}.__getitem__, "x", what="step")
        assert isinstance(raised.value.__cause__, KeyError)
        assert await calls.run_paced(pace, threading.get_ident) != loop_thread  # an error resets the pace

    try:
        asyncio.run(scenario())
    finally:
        calls.shutdown()


def test_an_inline_call_past_the_timeout_fails_and_zero_never_inlines():
    calls = EnvCalls(max_concurrent=1, timeout_s=0.05, inline_below_s=1.0)
    never = EnvCalls(max_concurrent=1, timeout_s=5, inline_below_s=0)
    pace, pool_only = calls.pace(), never.pace()

    async def scenario():
        await calls.run_paced(pace, int)  # timed in the pool: fast
        with pytest.raises(EnvCallTimeout, match=r"env_step_timeout_s=0\.05 s"):
            await calls.run_paced(pace, time.sleep, 0.1)  # inline: it returns, then fails as overrun
        loop_thread = threading.get_ident()
        assert [await never.run_paced(pool_only, threading.get_ident) for _ in range(3)].count(
            loop_thread
        ) == 0

    try:
        asyncio.run(scenario())
    finally:
        calls.shutdown()
        never.shutdown()


def _Declares(never_blocks: object) -> object:
    """An env stand-in whose class declares (or not) that its calls never block."""
    return type("Declares", (), {"never_blocks": never_blocks})()


def test_inline_calls_that_hold_the_loop_send_every_env_of_their_class_to_the_pool(caplog):
    """An env class declaring `never_blocks` falsely: once `REVOKE_AFTER` of its inline calls held the loop
    for `INLINE_REVOKE_S` (not one: that could be the machine), inline calls are revoked for every env of the
    class in this worker, with one warning naming it; another class keeps them."""
    calls = EnvCalls(max_concurrent=2, timeout_s=5)
    liar_cls = type("LyingEnv", (), {"never_blocks": True})
    liars, honest = [calls.pace(liar_cls()) for _ in range(2)], calls.pace(_Declares(True))
    wait = INLINE_REVOKE_S * 1.5

    async def scenario():
        loop_thread = threading.get_ident()
        for pace in (liars[1], honest):
            await calls.run_paced(pace, int)  # timed in the pool: fast, so the next call runs inline
        for blocked in range(REVOKE_AFTER):
            await calls.run_paced(liars[0], int)  # in the pool (after a slow call): fast again
            assert await calls.run_paced(liars[0], threading.get_ident) == loop_thread, blocked
            await calls.run_paced(liars[0], time.sleep, wait, what="env 'wait' step")  # inline: blocks
            assert not caplog.records or blocked == REVOKE_AFTER - 1
        where = [await calls.run_paced(pace, threading.get_ident) for pace in liars for _ in range(3)]
        assert loop_thread not in where  # both liars, the other one's fast pace included
        assert await calls.run_paced(honest, threading.get_ident) == loop_thread

    with caplog.at_level("WARNING", logger="roll_rollout.hosting.call_pace"):
        try:
            asyncio.run(scenario())
        finally:
            calls.shutdown()
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    message = caplog.records[0].getMessage()
    assert "env 'wait' step ran inline" in message and f"{REVOKE_AFTER} of the" in message
    assert "env class LyingEnv so far took over 20 ms" in message and "set never_blocks = False" in message


def test_a_stray_slow_inline_call_of_a_built_in_keeps_its_grant():
    """A built-in preempted once in a while (a slow call in twice `1 / REVOKE_SHARE`) keeps running inline;
    when its calls start blocking, the grant is revoked within a few of them."""
    grant, period = InlineGrant("FrozenLakeEnv"), int(2 / REVOKE_SHARE)
    for call in range(REVOKE_AFTER * period):
        grant.record("step", INLINE_REVOKE_S if call % period == 0 else 1e-5, INLINE_REVOKE_S)
    assert (grant.slow, grant.open) == (REVOKE_AFTER, True)
    blocked = 0
    while grant.open and blocked < 100:
        grant.record("step", INLINE_REVOKE_S, INLINE_REVOKE_S)
        blocked += 1
    assert blocked <= REVOKE_AFTER + 1  # 1% of 600 calls: the fourth blocking one


def test_by_default_only_envs_declaring_never_blocks_run_inline():
    default = EnvCalls(max_concurrent=2, timeout_s=5)
    declared, undeclared = default.pace(_Declares(True)), default.pace(_Declares(False))
    assert declared.inline_below_s == INLINE_OPT_IN_S and undeclared.inline_below_s == 0
    assert default.pace(_Declares("yes")).inline_below_s == 0  # only the boolean True declares it
    assert default.pace(None).inline_below_s == 0  # no env yet (a slot between envs)
    for explicit in (0.0, 0.01):  # a number applies to every env, declared or not
        calls = EnvCalls(inline_below_s=explicit)
        assert {calls.pace(_Declares(flag)).inline_below_s for flag in (True, False)} == {explicit}

    async def scenario():
        loop_thread = threading.get_ident()
        inline = [await default.run_paced(declared, threading.get_ident) for _ in range(3)]
        pooled = [await default.run_paced(undeclared, threading.get_ident) for _ in range(3)]
        assert inline[0] != loop_thread and inline[1:] == [loop_thread] * 2
        assert loop_thread not in pooled

    try:
        asyncio.run(scenario())
    finally:
        default.shutdown()


def test_the_built_in_games_declare_never_blocks_and_the_sandbox_does_not():
    import roll_envs

    for env_id in ("frozen_lake", "sokoban", "four_choice", "tictactoe"):
        assert type(roll_envs.make(env_id)).never_blocks is True, env_id
    assert type(roll_envs.make("sandbox", isolation="none")).never_blocks is False  # none: runs anywhere
    assert type(roll_envs.make("webshop_lite")).never_blocks is False
