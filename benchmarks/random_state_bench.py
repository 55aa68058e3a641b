"""What isolating an env's `random` / `np.random` costs per env call (`roll_envs.random_state`).

    uv run python benchmarks/random_state_bench.py

Prints, in microseconds per call (best of several repeats, so a loaded machine inflates them less):
the swap around an empty call and its parts, a FrozenLake step with and without it, 8 threads calling
at once (the process-wide lock serialises isolated calls), and a step through the rollout's `EnvCalls`
(thread pool + asyncio) with and without a random state.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
import roll_envs
from roll_envs.random_state import EnvRandomState
from roll_rollout import EnvCalls


def best_us(fn: Callable[[], Any], number: int = 20_000, repeat: int = 7) -> float:
    """Best time of `fn` in microseconds."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def threaded_us(isolated: bool, work: Callable[[], Any], threads: int = 8, calls: int = 1000) -> float:
    """Wall time per call of `threads` threads each making `calls` calls of `work` (best of 3)."""
    states = [EnvRandomState(i) for i in range(threads)]

    def body(i: int) -> None:
        for _ in range(calls):
            states[i].run(work) if isolated else work()

    times = []
    for _ in range(3):
        pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        times.append((time.perf_counter() - start) / (threads * calls) * 1e6)
    return min(times)


async def env_calls_us(isolated: bool, env: Any, calls: int = 3000) -> float:
    """Per call: `calls` FrozenLake steps through `EnvCalls.run`, 8 at a time."""
    pool = EnvCalls(max_concurrent=8, timeout_s=60.0)
    states = [EnvRandomState(i) if isolated else None for i in range(8)]

    async def slot(i: int) -> None:
        for _ in range(calls // 8):
            await pool.run(env[i].step, "<answer>Left</answer>", random_state=states[i])

    start = time.perf_counter()
    await asyncio.gather(*(slot(i) for i in range(8)))
    pool.shutdown()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    def noop() -> None:
        return None

    state = EnvRandomState(1)
    plain, isolated = best_us(lambda: noop()), best_us(lambda: state.run(noop))
    print(
        f"empty call                       {plain:7.2f}  isolated {isolated:7.2f}  (+{isolated - plain:.2f})"
    )
    py, bitgen, mine, lock = (
        random.getstate(),
        np.random.get_bit_generator(),
        np.random.MT19937(1),
        threading.Lock(),
    )
    parts = {
        "  random.getstate()": random.getstate,
        "  random.setstate()": lambda: random.setstate(py),
        "  np.random.set_bit_generator x2": lambda: (
            np.random.set_bit_generator(mine),
            np.random.set_bit_generator(bitgen),
        ),
        "  lock acquire + release": lambda: (lock.acquire(), lock.release()),
    }
    for name, fn in parts.items():
        print(f"{name:33s}{best_us(fn):7.2f}")
    print(f"  reseed(seed) (once per reset)  {best_us(lambda: state.reseed(12345), number=2000):7.2f}")

    envs = [roll_envs.make("frozen_lake", max_steps=100_000) for _ in range(8)]
    for e in envs:
        e.reset(seed=0)
    step, step_iso = (
        best_us(lambda: envs[0].step("<answer>Left</answer>"), number=5000),
        best_us(lambda: state.run(envs[0].step, "<answer>Left</answer>"), number=5000),
    )
    print(f"frozen_lake step                 {step:7.2f}  isolated {step_iso:7.2f}  (+{step_iso - step:.2f})")

    def work() -> int:
        return sum(range(400))

    alone = best_us(work, number=5000)
    free, serial = threaded_us(False, work), threaded_us(True, work)
    print(
        f"8 threads, {alone:.1f} us of work     {free:7.2f}  isolated {serial:7.2f}  (+{serial - free:.2f})"
    )
    through, through_iso = asyncio.run(env_calls_us(False, envs)), asyncio.run(env_calls_us(True, envs))
    print(
        f"EnvCalls.run, frozen_lake step   {through:7.2f}  isolated {through_iso:7.2f}  (+{through_iso - through:.2f})"
    )


if __name__ == "__main__":
    main()
