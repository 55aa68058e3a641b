"""`EnvRandomState` / `IsolatedEnv`: each env's own `random` and `np.random`, swapped in around its calls."""

from __future__ import annotations

import random
import threading
import time
from typing import Any, ClassVar

import numpy as np
import pytest
from roll_envs import EnvRandomState, IsolatedCallAbandoned, IsolatedEnv


class GlobalDrawsEnv:
    """An outside-library env: reset and step draw from the process-wide `random` and `np.random`,
    yielding the GIL between draws so threads interleave."""

    instruction = "draw"
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self) -> None:
        self.made_with = random.random()  # the constructor draws too
        self.value = 0.0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        self.value = random.random()
        time.sleep(0)
        self.value += float(np.random.rand())
        return f"{self.made_with:.6f} {self.value:.12f}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        a = random.randrange(1000)
        time.sleep(0)
        b = int(np.random.randint(1000))
        time.sleep(0)
        self.value += a + b + float(np.random.standard_normal())
        return f"{self.value:.12f}", float(a), False, False, {}

    def close(self) -> None:
        """Nothing to release."""


def play(env: Any, seed: int, turns: int = 20) -> list[Any]:
    out: list[Any] = [env.reset(seed=seed)[0]]
    out += [env.step("go")[:2] for _ in range(turns)]
    return out


def play_in_threads(isolated: bool, slots: int = 8) -> list[list[Any]]:
    results: list[list[Any]] = [[] for _ in range(slots)]
    start = threading.Barrier(slots)

    def slot(i: int) -> None:
        env = IsolatedEnv.make(GlobalDrawsEnv) if isolated else GlobalDrawsEnv()
        start.wait()
        results[i] = play(env, seed=123)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_eight_slots_in_threads_play_one_episode_per_seed():
    episodes = play_in_threads(isolated=True)
    assert all(e == episodes[0] for e in episodes)
    assert play(IsolatedEnv.make(GlobalDrawsEnv), seed=124) != episodes[0]


def test_without_isolation_the_slots_play_different_episodes():
    episodes = play_in_threads(isolated=False)
    assert len({repr(e) for e in episodes}) == len(episodes)


def test_the_process_state_is_restored_around_every_call():
    random.seed(1)
    np.random.seed(1)
    py, bitgen = random.getstate(), np.random.get_bit_generator()
    env = IsolatedEnv.make(GlobalDrawsEnv)
    play(env, seed=5)
    assert random.getstate() == py and np.random.get_bit_generator() is bitgen


def test_reset_seed_gives_the_same_state_anywhere_and_a_self_seeding_env_still_works():
    def draws() -> tuple[float, float]:
        return random.random(), float(np.random.rand())

    a, b = EnvRandomState(7), EnvRandomState(3)
    b.reseed(7)
    assert a.run(draws) == b.run(draws)
    assert a.run(draws) != EnvRandomState(8).run(draws)
    expected = (random.Random(7).random(), float(np.random.RandomState(np.random.MT19937(7)).rand()))
    assert EnvRandomState(7).run(draws) == expected

    def self_seeding() -> tuple[float, float]:
        random.seed(11)
        np.random.seed(11)
        return draws()

    assert EnvRandomState(1).run(self_seeding) == EnvRandomState(2).run(self_seeding)
    state = EnvRandomState(0)
    state.run(lambda: np.random.set_bit_generator(np.random.PCG64(5)))  # an env installing its own
    assert state.run(lambda: type(np.random.get_bit_generator()).__name__) == "PCG64"


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (1.5, TypeError), ("3", TypeError)])
def test_bad_seeds_say_what_is_expected(seed, error):
    with pytest.raises(error, match="seeded with an int"):
        EnvRandomState(0).reseed(seed)


def test_a_nested_call_in_the_same_thread_does_not_deadlock():
    outer, inner = EnvRandomState(1), EnvRandomState(2)

    def nested() -> tuple[float, float, float]:
        before = random.random()
        middle = inner.run(random.random)
        return before, middle, random.random()

    before, middle, after = outer.run(nested)
    assert middle == EnvRandomState(2).run(random.random)
    assert (before, after) == tuple(EnvRandomState(1).run(lambda: (random.random(), random.random())))


def test_an_abandoned_call_gives_the_lock_back_and_changes_nothing_when_it_returns():
    random.seed(3)
    py = random.getstate()
    hung_state = EnvRandomState(1)
    entered, release = threading.Event(), threading.Event()

    def hang() -> None:
        entered.set()
        release.wait(10)

    call = hung_state.call(hang)
    thread = threading.Thread(target=call)
    thread.start()
    assert entered.wait(10)
    call.abandon()  # e.g. the rollout's timeout fired
    assert random.getstate() == py  # the process's state is back
    assert EnvRandomState(5).run(random.random) == random.Random(5).random()  # the lock is free
    release.set()
    thread.join(10)
    assert hung_state.run(random.random) == random.Random(1).random()  # its state was not saved

    waiting = EnvRandomState(0).call(random.random)
    waiting.abandon()
    with pytest.raises(IsolatedCallAbandoned, match="abandoned before it started"):
        waiting()
