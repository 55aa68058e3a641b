"""Env slots in one worker: each with its own `random` / `np.random` (one seed, one episode, in any slot),
and each turn anchored on the env's `state_key`, not on its observation."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, ClassVar

import numpy as np
import pytest
from roll_rollout import EnvCalls, EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings
from roll_rollout.hosting.worker import EnvCallLimits
from roll_rollout.testing import ScriptedPolicy, play_jobs

SLOTS = 8


class GlobalDrawsEnv:
    """An outside-library env: reset and step draw from the process-wide `random` and `np.random`,
    yielding the GIL between draws so the pool threads interleave."""

    instruction = "draw"
    metric_aggregation: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        self.offset = random.randrange(100)  # the constructor draws too
        self.total = 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        self.total = self.offset + random.randrange(1000)
        time.sleep(0)
        self.total += int(np.random.randint(1000))
        return f"total {self.total}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        drawn = random.randrange(1000)
        time.sleep(0)
        drawn += int(np.random.randint(1000))
        self.total += drawn
        return f"total {self.total}", float(drawn), False, False, {"success": False}

    def close(self) -> None:
        """Nothing to release."""


class RingWithHistoryEnv:
    """Walks a ring of two cells; the observation carries the whole history, `state_key` only the cell."""

    instruction = "walk"
    metric_aggregation: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        self.cell, self.history = 0, []

    def _out(self) -> tuple[str, dict[str, Any]]:
        obs = f"moves so far: {' '.join(self.history) or 'none'}\nyou are on cell {self.cell}"
        return obs, {"state_key": f"cell {self.cell}", "success": False}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        self.cell, self.history = (seed or 0) % 2, []
        return self._out()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.cell = 1 - self.cell
        self.history.append(action.strip())
        obs, info = self._out()
        return obs, 0.0, False, False, info

    def close(self) -> None:
        """Nothing to release."""


def play(chat_tokenizer, answer_ids, factory, seeds: list[int], max_turns: int = 6) -> list[Any]:
    """One episode per slot (slot i plays seeds[i]), all slots at once; trajectories by slot."""
    slots = [EnvSlotSpec(e, "A", "test", max_turns=max_turns) for e in range(len(seeds))]
    limits = EnvCallLimits(max_env_step_concurrent=len(seeds), env_step_timeout_s=30.0)
    worker = EnvWorker(
        slots, chat_tokenizer, ScriptedPolicy(answer_ids), env_factory=lambda _t, _c: factory(), limits=limits
    )
    sampling = SamplingSettings(max_new_tokens=4)
    jobs = [EpisodeJob(e, 0, 100 + e, seed, sampling) for e, seed in enumerate(seeds)]

    trajs = asyncio.run(play_jobs(worker, jobs))
    errors = [t.error for t in trajs if t.error is not None]
    assert not errors, "\n".join(errors)  # a str: pytest shows it as is at any verbosity (a list it reprs)
    return trajs


def episode(traj: Any) -> list[Any]:
    return [(t.state_key, t.reward) for t in traj.turns]


def test_eight_slots_given_one_seed_play_one_episode(chat_tokenizer, answer_ids):
    trajs = play(chat_tokenizer, answer_ids, GlobalDrawsEnv, [7] * SLOTS)
    assert len(trajs) == SLOTS and len(trajs[0].turns) == 6
    assert all(episode(t) == episode(trajs[0]) for t in trajs)
    other = play(chat_tokenizer, answer_ids, GlobalDrawsEnv, [8])
    assert episode(other[0]) != episode(trajs[0])


def test_without_the_isolation_the_slots_play_different_episodes(chat_tokenizer, answer_ids, monkeypatch):
    """The test above is not vacuous: with env calls run on the process-wide generators, it fails."""
    run = EnvCalls.run

    async def unisolated(self, fn, *args, what="env call", random_state=None, **kwargs):
        return await run(self, fn, *args, what=what, **kwargs)

    monkeypatch.setattr(EnvCalls, "run", unisolated)
    trajs = play(chat_tokenizer, answer_ids, GlobalDrawsEnv, [7] * SLOTS)
    assert len({repr(episode(t)) for t in trajs}) > 1


def test_turns_are_anchored_on_the_state_key_not_the_observation(chat_tokenizer, answer_ids):
    a, b = play(chat_tokenizer, answer_ids, RingWithHistoryEnv, [0, 1], max_turns=5)
    assert [t.state_key for t in a.turns] == ["cell 0", "cell 1", "cell 0", "cell 1", "cell 0"]
    assert a.turns[0].observation == "moves so far: none\nyou are on cell 0"  # what the model saw
    assert a.turns[2].observation == "moves so far: Left Left\nyou are on cell 0"
    assert len({t.observation for t in a.turns}) == 5  # every observation differs, the states repeat
    anchors = [t.anchor_id for t in a.turns]
    assert anchors[0] == anchors[2] == anchors[4] != anchors[1] == anchors[3]
    # equal states in the other episode (reached by another history) share the anchors
    assert [t.anchor_id for t in b.turns] == [anchors[1], anchors[0]] * 2 + [anchors[1]]


class BadStateKeyEnv(RingWithHistoryEnv):
    def _out(self) -> tuple[str, dict[str, Any]]:
        obs, info = super()._out()
        return obs, {**info, "state_key": ("cell", self.cell)}


def test_a_state_key_that_is_not_a_string_fails_the_episode_with_the_fix(chat_tokenizer, answer_ids):
    with pytest.raises(AssertionError, match=r"info\['state_key'\] of type tuple; it must be a str"):
        play(chat_tokenizer, answer_ids, BadStateKeyEnv, [0])


def full_episode(traj: Any) -> list[Any]:
    return [(t.observation, t.state_key, t.reward) for t in traj.turns] + [traj.success]


@pytest.mark.parametrize("env_id", ["frozen_lake", "sokoban"])
def test_a_declared_env_plays_the_same_episodes_without_isolation(
    chat_tokenizer, answer_ids, monkeypatch, env_id
):
    """`owns_random_state`: a built-in's calls run without a random state (no lock), and its episodes
    are the ones it plays isolated."""
    import roll_envs

    seeds = [0, 1, 2, 3, 0, 1]
    cls = type(roll_envs.make(env_id))
    assert cls.owns_random_state is True
    given: list[Any] = []
    run = EnvCalls.run

    async def spying(self, fn, *args, what="env call", random_state=None, **kwargs):
        given.append(random_state)
        return await run(self, fn, *args, what=what, random_state=random_state, **kwargs)

    monkeypatch.setattr(EnvCalls, "run", spying)
    declared = play(chat_tokenizer, answer_ids, lambda: roll_envs.make(env_id), seeds)
    assert given and all(state is None for state in given)
    given.clear()
    monkeypatch.setattr(cls, "owns_random_state", False)
    isolated = play(chat_tokenizer, answer_ids, lambda: roll_envs.make(env_id), seeds)
    assert given and all(state is not None for state in given)
    assert [full_episode(t) for t in declared] == [full_episode(t) for t in isolated]
    assert full_episode(declared[0]) == full_episode(declared[4])
    assert full_episode(declared[0]) != full_episode(declared[1])
