"""Hosting hints a subclass of a built-in game inherits but does not keep (`roll_envs.hints`): its calls that
wait never run on the worker's event loop, so its slots wait side by side and a hung step is timed out."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import msgpack
from roll_envs import FrozenLakeEnv
from roll_rollout import (
    EnvCallLimits,
    EnvSlotSpec,
    EnvWorker,
    EpisodeJob,
    SamplingSettings,
    Trajectory,
    decode_trajectory,
)
from roll_rollout.hosting.worker import encode_jobs
from roll_rollout.testing import ScriptedPolicy

ENVS = 64
STEP_S = 0.1
"""A judge's wait: long enough that the CPU part of a wave of 64 steps (about 0.6 ms each on a loaded
2-core machine: prompt, step, thread hop) stays well under it, so the ratio measures the waiting."""
TURNS = 12
ATTEMPTS = 2


class JudgedLake(FrozenLakeEnv):
    """FrozenLake whose step waits `STEP_S` (a judge's answer). It draws from no generator of its own
    code, so it declares `owns_random_state` again; it inherits `never_blocks`, which is false for it."""

    owns_random_state = True

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        time.sleep(STEP_S)
        return super().step(action)


class HangingLake(FrozenLakeEnv):
    """FrozenLake whose second step hangs (until `release`) in the first env built; `inside` while it does."""

    owns_random_state = True
    built = itertools.count()
    release = threading.Event()
    inside = threading.Event()

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.hangs = next(HangingLake.built) == 0

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.hangs and self.elapsed_steps == 1:
            HangingLake.inside.set()
            HangingLake.release.wait(5.0)
            HangingLake.inside.clear()
        return super().step(action)


def _worker(tokenizer: Any, env_cls: type, envs: int, limits: EnvCallLimits) -> EnvWorker:
    slots = [EnvSlotSpec(e, "lake", "lake", max_turns=TURNS) for e in range(envs)]
    answer = tokenizer.encode("<answer> Left </answer>", add_special_tokens=False)
    return EnvWorker(
        slots,
        tokenizer,
        ScriptedPolicy([*answer, tokenizer.eos_token_id]),
        env_factory=lambda _t, _c: env_cls(is_slippery=False, max_steps=TURNS),
        limits=limits,
    )


async def _play(worker: EnvWorker, envs: int) -> list[Trajectory]:
    """One episode per slot (seeds 0..envs-1); their trajectories as the worker reports them."""
    sampling = SamplingSettings(max_new_tokens=8)
    await worker.submit(encode_jobs([EpisodeJob(e, e, e, e, sampling) for e in range(envs)]))
    done: list[Trajectory] = []
    while len(done) < envs:
        done += [decode_trajectory(t) for t in msgpack.unpackb(await worker.poll(0.01))["done"]]
    return done


def test_slots_of_a_waiting_subclass_of_a_built_in_wait_side_by_side(chat_tokenizer):
    """64 slots of `JudgedLake` in one worker take at most 1/0.7 of the ideal time, the waits of the longest
    episode (all slots waiting side by side, nothing else taking time): its inherited `never_blocks` does
    not hold, so no step of it runs (and waits) on the event loop. The better of up to `ATTEMPTS` fresh
    workers (a process's first one pays one-off costs, and a busy machine slows the CPU part)."""
    tries: list[tuple[float, float]] = []
    for _ in range(ATTEMPTS):
        worker = _worker(chat_tokenizer, JudgedLake, ENVS, EnvCallLimits(max_env_step_concurrent=ENVS))
        try:
            began = time.perf_counter()
            done = asyncio.run(asyncio.wait_for(_play(worker, ENVS), 60))
            took = time.perf_counter() - began
        finally:
            worker.close()
        assert all(t.error is None for t in done), [t.error for t in done if t.error][:1]
        longest = max(len(t.turns) for t in done)  # "Left" from the start: a hole, or TURNS steps
        assert longest == TURNS
        tries.append((TURNS * STEP_S / took, took))
        if tries[-1][0] >= 0.7:
            return
    ratio, took = max(tries)
    raise AssertionError(
        f"{ENVS} slots took {took:.2f} s at best: {ratio:.3f} of the ideal {TURNS * STEP_S:.2f} s"
    )


def test_a_hung_step_of_a_subclass_of_a_built_in_is_timed_out_while_the_others_play(chat_tokenizer):
    """The first `HangingLake`'s second step hangs: it is ended by the timeout while the hang goes on, and the
    other slots finish their episodes meanwhile (run inline, the hang would hold the whole worker)."""
    limits = EnvCallLimits(max_env_step_concurrent=8, env_step_timeout_s=0.5, backup_after_s=0)
    worker = _worker(chat_tokenizer, HangingLake, 8, limits)
    try:
        done = asyncio.run(asyncio.wait_for(_play(worker, 8), 30))
        still_hung = HangingLake.inside.is_set()  # read before releasing it
    finally:
        HangingLake.release.set()
        worker.close()
    errors = {t.env_id: t.error for t in done}
    assert errors[0] is not None and errors[0].startswith("env_timeout"), errors[0]
    others = {e: error[:90] for e, error in errors.items() if e and error}
    assert not others, f"the other slots failed too: {others}"
    assert still_hung, "every episode was reported only after the hung step returned: it held the event loop"
