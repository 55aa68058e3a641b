"""Test doubles for rollout code: scripted policies, a simulated LLM server, envs of known behaviour.

Used by roll's own tests and benchmarks, and importable by env authors who test their envs against the
scheduler without a model. Everything here is deterministic given its seed (latencies included, when
`time_scale` sleeps are real but their lengths are drawn from a seeded stream).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from roll_envs import FrozenLakeConfig, FrozenLakeEnv

from roll_rollout.policies.policy import GenerateRequest, GenerateResult

if TYPE_CHECKING:
    from roll_rollout.hosting.env_manager import EpisodeJob
    from roll_rollout.hosting.worker import EnvWorker
    from roll_rollout.schema import Trajectory

__all__ = [
    "CountdownEnv",
    "FaultyCountdownFactory",
    "FaultyEnv",
    "FaultyFrozenLake",
    "GlobalDrawsEnv",
    "ScriptedPolicy",
    "SimulatedLLMServer",
    "countdown_factory",
    "faulty_registry_env",
    "play_jobs",
]


class ScriptedPolicy:
    """Answers every request with `response_ids`, after `latency(request)` seconds (default none).

    `version` is stamped on every result as its policy version; tests bump it to simulate training.
    `record=True` keeps every request it was asked in `seen` (else None: benchmarks ask millions).
    """

    def __init__(
        self,
        response_ids: Sequence[int],
        latency: Callable[[GenerateRequest], float] | None = None,
        version: int = 0,
        record: bool = False,
    ) -> None:
        self.response_ids = list(response_ids)
        self.latency = latency
        self.version = version
        self.requests = 0
        self.seen: list[GenerateRequest] | None = [] if record else None

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """The scripted response, stamped with the current `version`."""
        self.requests += 1
        if self.seen is not None:
            self.seen.append(request)
        if self.latency is not None:
            await asyncio.sleep(self.latency(request))
        ids = self.response_ids[: request.sampling.max_new_tokens]
        return GenerateResult(list(ids), [-0.5] * len(ids), "stop", self.version)


async def play_jobs(
    worker: EnvWorker, jobs: Sequence[EpisodeJob], timeout_s: float = 60.0
) -> list[Trajectory]:
    """Submit `jobs` to `worker`, poll until each has finished, close the worker: the trajectories, by env slot."""
    import msgpack

    from roll_rollout.hosting.worker import encode_jobs
    from roll_rollout.schema import decode_trajectory

    try:
        await worker.submit(encode_jobs(jobs))
        done: list[Trajectory] = []
        async with asyncio.timeout(timeout_s):
            while len(done) < len(jobs):
                done += [decode_trajectory(p) for p in msgpack.unpackb(await worker.poll(0.05))["done"]]
        return sorted(done, key=lambda t: t.env_id)
    finally:
        worker.close()


class SimulatedLLMServer:
    """An LLM server with `num_slots` concurrent sequences and heavy-tailed latency per request.

    Each request waits for a free slot, then holds it for a lognormal time (median `median_s`, shape
    `sigma`) drawn from a seeded stream. `busy_s` sums the service times: `busy_s / num_slots` is the
    least wall time any scheduler could need for the same requests (the ideal bound).
    """

    def __init__(
        self,
        response_ids: Sequence[int],
        num_slots: int,
        median_s: float,
        sigma: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.response_ids = list(response_ids)
        self.num_slots = num_slots
        self.median_s = median_s
        self.sigma = sigma
        self._rng = random.Random(seed)
        self._slots: asyncio.Semaphore | None = None
        self.busy_s = 0.0
        self.requests = 0
        self.version = 0

    def service_time(self) -> float:
        """One request's service time (seconds)."""
        return self.median_s * math.exp(self._rng.gauss(0.0, self.sigma))

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Wait for a slot, hold it for a sampled service time, answer."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.num_slots)
        async with self._slots:
            duration = self.service_time()
            self.busy_s += duration
            self.requests += 1
            await asyncio.sleep(duration)
        ids = self.response_ids[: request.sampling.max_new_tokens]
        return GenerateResult(list(ids), [-0.5] * len(ids), "stop", self.version)


class CountdownEnv:
    """An episode of `min_turns + seed % spread` steps, reward 1 per step, success at the end.

    Episode length varies with the seed (deterministically), which is what the scheduler tests need.
    `step_s` makes each step sleep (a slow env); `reward_noise` adds a uniform draw in [0, noise) to
    each reward, from a stream seeded by `noise_seed`, so episodes of one seed score differently.
    """

    instruction = "count down"
    metric_aggregation: ClassVar[dict[str, str]] = {"steps_left": "min"}

    def __init__(
        self,
        min_turns: int = 1,
        spread: int = 3,
        step_s: float = 0.0,
        reward_noise: float = 0.0,
        noise_seed: int = 0,
    ) -> None:
        self.min_turns, self.spread, self.step_s = min_turns, spread, step_s
        self.reward_noise = reward_noise
        self._rng = random.Random(noise_seed)
        self.left = 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        """Start an episode whose length depends on `seed`."""
        self.left = self.min_turns + (seed or 0) % self.spread
        return f"left {self.left}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One step closer to the end."""
        if self.step_s:
            time.sleep(self.step_s)
        self.left -= 1
        info = {
            "action_is_valid": True,
            "action_is_effective": True,
            "success": self.left == 0,
            "metrics": {"steps_left": float(self.left)},
        }
        reward = 1.0 + (self._rng.random() * self.reward_noise if self.reward_noise else 0.0)
        return f"left {self.left}", reward, self.left == 0, False, info

    def close(self) -> None:
        """Nothing to release."""


def countdown_factory(
    min_turns: int = 1, spread: int = 3, step_s: float = 0.0, reward_noise: float = 0.0
) -> Callable[[str, dict[str, Any]], Any]:
    """An `env_factory` for `EnvWorker` that makes `CountdownEnv`s whatever the env type (each with its
    own noise stream)."""
    made = itertools.count()
    return lambda _type, _config: CountdownEnv(min_turns, spread, step_s, reward_noise, next(made))


class FaultyEnv:
    """Wraps an env; each `step` raises with probability `p_raise` or hangs with probability `p_hang`.

    Decisions come from a stream seeded by (`seed`, instance number), so a run injects the same faults
    in the same order. Every injected fault calls `record(kind)` ("raise" or "hang") first: the test's
    independent count. A hang blocks until `release` is set (never, by default: a truly hung env).
    """

    _instances = 0
    _instances_lock = threading.Lock()

    def __init__(
        self,
        env: Any,
        p_raise: float,
        p_hang: float,
        seed: int = 0,
        record: Callable[[str], None] = lambda kind: None,
        release: threading.Event | None = None,
    ) -> None:
        with FaultyEnv._instances_lock:
            FaultyEnv._instances += 1
            instance = FaultyEnv._instances
        self.env = env
        self.p_raise, self.p_hang = p_raise, p_hang
        self._rng = random.Random(seed * 1_000_003 + instance)
        self._record = record
        self._release = release or threading.Event()
        self.instruction = getattr(env, "instruction", "")
        self.metric_aggregation = getattr(env, "metric_aggregation", {})

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        """The wrapped env's reset (faults are injected in `step` only)."""
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The wrapped env's step, or an injected fault."""
        draw = self._rng.random()
        if draw < self.p_raise:
            self._record("raise")
            raise RuntimeError("injected env fault")
        if draw < self.p_raise + self.p_hang:
            self._record("hang")
            self._release.wait()
            raise RuntimeError("hung env released")
        return self.env.step(action)

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()


@dataclass(frozen=True)
class FaultyCountdownFactory:
    """A picklable `env_factory` (it crosses into Ray actors) of `CountdownEnv`s wrapped in `FaultyEnv`.

    Hangs are real: nothing ever releases them, as with an env stuck in a C call. The fault stream is
    salted with the process id, so a recycled worker process does not replay its predecessor's faults.
    """

    p_raise: float
    p_hang: float
    min_turns: int = 2
    spread: int = 3
    seed: int = 0

    def __call__(self, _type: str, _config: dict[str, Any]) -> FaultyEnv:
        """A fresh faulty env."""
        salted = self.seed + 7919 * os.getpid()
        return FaultyEnv(CountdownEnv(self.min_turns, self.spread), self.p_raise, self.p_hang, salted)


class GlobalDrawsEnv:
    """An env as outside libraries write them: its constructor, `reset` and `step` draw from the process-wide
    `random` and `np.random` (so it does not declare `owns_random_state`). Observations and rewards show the
    draws: one seed, one episode only when each slot's generators are its own. `hang_s` makes every step
    sleep that long first (a hung env, for a long `hang_s`). Registry-style keyword arguments.
    """

    instruction = "draw"
    metric_aggregation: ClassVar[dict[str, str]] = {}

    def __init__(self, render_mode: str | None = None, hang_s: float = 0.0) -> None:
        import numpy as np

        self._np = np
        self.hang_s = hang_s
        self.offset = random.randrange(100)
        self.total = 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        """A total drawn from both generators."""
        self.total = self.offset + random.randrange(1000) + int(self._np.random.randint(1000))
        return f"total {self.total}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Adds two draws (after `hang_s`); never ends by itself."""
        if self.hang_s:
            time.sleep(self.hang_s)
        drawn = random.randrange(1000) + int(self._np.random.randint(1000))
        self.total += drawn
        return f"total {self.total}", float(drawn), False, False, {"success": False}

    def demonstration(self) -> str:
        """An expert's answer: the running total (a function of every draw so far)."""
        return f"total {self.total}"

    def close(self) -> None:
        """Nothing to release."""


class PreloadProbeEnv(GlobalDrawsEnv):
    """A `GlobalDrawsEnv` naming a library it imports when built (`process_preload`); its instruction says
    whether that library was loaded already when the constructor ran (`colorsys`: stdlib, imported by neither
    numpy nor roll_envs), i.e. whether the env's process was forked after importing it."""

    process_preload: ClassVar[tuple[str, ...]] = ("colorsys",)

    def __init__(self, render_mode: str | None = None, hang_s: float = 0.0) -> None:
        self.instruction = f"colorsys loaded before the env: {'colorsys' in sys.modules}"
        import colorsys  # noqa: F401  (the library the env uses)

        super().__init__(render_mode, hang_s)


def faulty_registry_env(
    render_mode: str | None = "text",
    inner: str = "frozen_lake",
    p_raise: float = 0.05,
    p_hang: float = 0.01,
    seed: int = 0,
    **config: Any,
) -> FaultyEnv:
    """A registry entry point: `roll_envs.make(inner, **config)` in a `FaultyEnv` whose hangs are never
    released, its fault stream salted with the process id (one per env process, as `FaultyCountdownFactory`).
    Registered for instance as `roll_envs.register("faulty_frozen_lake", "roll_rollout.testing:faulty_registry_env")`.
    """
    import roll_envs

    env = roll_envs.make(inner, render_mode=render_mode, **config)
    faulty = FaultyEnv(env, p_raise, p_hang, seed + 7919 * os.getpid())
    faulty.instruction = getattr(env, "instruction", "")
    return faulty


class FaultyFrozenLakeConfig(FrozenLakeConfig):
    """FrozenLake's config and `FaultyFrozenLake`'s fault rates (the salt of its stream: `fault_seed`)."""

    p_raise: float = 0.05
    p_hang: float = 0.01
    fault_seed: int = 0


class FaultyFrozenLake(FrozenLakeEnv):
    """A subclass of a built-in game whose `step` raises with probability `p_raise` or hangs for good with
    probability `p_hang`: it inherits `never_blocks` and `owns_random_state`, and overrides `step`, so
    neither holds for it (`roll_envs.hints`). Its fault stream is salted with the process id and instance
    number. Registered for instance as `roll_envs.register("faulty_lake", "roll_rollout.testing:FaultyFrozenLake")`.
    """

    config_cls = FaultyFrozenLakeConfig
    _instances = itertools.count()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self._faults = random.Random(cfg.fault_seed + 7919 * os.getpid() + 1_000_003 * next(self._instances))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """FrozenLake's step, or an injected fault: an error, or a wait that never ends."""
        draw, cfg = self._faults.random(), self.config
        if draw < cfg.p_raise:
            raise RuntimeError("injected env fault")
        if draw < cfg.p_raise + cfg.p_hang:
            threading.Event().wait()
        return super().step(action)
