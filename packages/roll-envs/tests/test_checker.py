"""check_env: every built-in passes; each kind of broken env gets a message saying what to fix."""

from __future__ import annotations

import random
import time
from typing import Any

import msgpack
import numpy as np
import pytest
import roll_envs
from roll_envs import checker
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.envs.builtins import BUILTINS

BUILTIN_IDS = [b.id for b in BUILTINS if b.id != "gym_adapter"]
"""roll's own envs (not `list_envs()`: test modules of other packages register test envs at collection)."""
NO_CALLS = {"sandbox": {"isolation": "none"}}
"""Configs these tests need: they play only `valid_actions` (the sandbox's is a submit, which runs no call), so
the sandbox's isolation, which a machine without namespaces refuses by default, plays no part."""


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_every_builtin_passes(env_id):
    env = roll_envs.make(env_id, **NO_CALLS.get(env_id, {}))
    assert roll_envs.check_env(env, seeds=(0, 1, 2, 3)) == []
    _, info = env.reset(seed=0)
    _, _, _, _, step_info = env.step(f"<answer>{env.valid_actions[0]}</answer>")
    for payload in (info, step_info):
        assert msgpack.unpackb(msgpack.packb(payload), raw=False) == payload


class GoodEnv(BaseEnv):
    """A minimal correct env the broken variants below start from."""

    @property
    def instruction(self) -> str:
        return "Say <answer>Go</answer>."

    @property
    def valid_actions(self) -> list[str]:
        return ["Go"]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.n = int(rng.integers(5))

    def apply_action(self, action: str) -> ActionOutcome:
        self.n += 1
        return ActionOutcome(1.0, self.n >= 8, True)

    def text_observation(self) -> str:
        return f"n={self.n}"

    def is_success(self) -> bool:
        return self.n >= 8


class GlobalRandom(GoodEnv):
    """Draws from the process-wide generators, as outside env libraries do: fine under roll's isolation."""

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.n = random.randrange(3) + int(np.random.randint(2))

    def apply_action(self, action: str) -> ActionOutcome:
        self.n += random.choice((0, 1)) + int(np.random.randint(2))
        return ActionOutcome(1.0, self.n >= 8, True)


class TimeDependent(GoodEnv):
    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.stamp = time.perf_counter_ns()  # outside the seed, even under isolation; never the same twice
        self.n = self.stamp % 5

    def text_observation(self) -> str:
        return f"n={self.n} t={self.stamp}"


_SHARED = {"n": 0}
"""Module-level episode state: each instance alone is deterministic, two interleaved ones are not."""


class SharedModuleState(GoodEnv):
    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        _SHARED["n"] = int(rng.integers(5))

    def apply_action(self, action: str) -> ActionOutcome:
        _SHARED["n"] += 1
        return ActionOutcome(1.0, _SHARED["n"] >= 8, True)

    def text_observation(self) -> str:
        return f"n={_SHARED['n']}"

    def is_success(self) -> bool:
        return _SHARED["n"] >= 8


class NumpyReward(GoodEnv):
    def step(self, action: str):  # type: ignore[override]
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.float32(reward), np.bool_(terminated), truncated, info


class BadInfo(GoodEnv):
    def reset(self, *, seed=None, options=None):  # type: ignore[override]
        obs, info = super().reset(seed=seed, options=options)
        info.pop("success")
        info["state"] = {1, 2}
        return obs, info


class RaisesOnGarbage(GoodEnv):
    def step(self, action: str):  # type: ignore[override]
        if "<answer>" not in action:
            raise ValueError("cannot parse")
        return super().step(action)


class NeverEnds(GoodEnv):
    def step(self, action: str):  # type: ignore[override]
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


class BadFrame(GoodEnv):
    def render_frame(self) -> np.ndarray:
        return np.zeros((4, 4), dtype=np.float64)


class NoInstruction(GoodEnv):
    @property
    def instruction(self) -> str:
        return ""


class Demonstrates(GoodEnv):
    def demonstration(self) -> str | None:
        return self.format_answer("Go")


class DemonstratesGarbage(GoodEnv):
    def demonstration(self) -> str | None:
        return self.format_answer("Jump") if self.n >= 6 else self.format_answer("Go")


class DemonstratesANumber(GoodEnv):
    def demonstration(self) -> str | None:
        return 3  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (GoodEnv, None),
        (GlobalRandom, None),
        (TimeDependent, "two runs differ"),
        (SharedModuleState, "stepped alternately with the same actions differ at turn 1"),
        (NumpyReward, "reward should be a Python float"),
        (BadInfo, "info lacks 'success'"),
        (BadInfo, "msgpack"),
        (RaisesOnGarbage, "treat unparsable text as an invalid action"),
        (NeverEnds, "still running after max_steps"),
        (BadFrame, "(H, W, 3) uint8"),
        (NoInstruction, "instruction should be a non-empty str"),
        (Demonstrates, None),
        (
            DemonstratesGarbage,
            "DemonstratesGarbage: seed 0 turn 2: demonstration() returned '<answer>Jump</answer>'",
        ),
        (DemonstratesGarbage, "reads as an invalid answer"),
        (DemonstratesANumber, "demonstration() returned int 3; expected a str or None"),
    ],
)
def test_broken_envs_are_explained(cls, expected):
    env = cls(max_steps=20)
    if expected is None:
        assert roll_envs.check_env(env) == []
        return
    with pytest.raises(roll_envs.CheckEnvError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        roll_envs.check_env(env)
    problems = roll_envs.check_env(env, raise_on_error=False)
    assert all(isinstance(p, str) and p for p in problems)


def test_the_interleaving_check_names_the_fix_and_uses_make_env():
    problems = roll_envs.check_env(SharedModuleState(max_steps=20), raise_on_error=False)
    assert len(problems) == 1 and "module- or class-level counter" in problems[0]
    assert checker.check_interleaved(GlobalRandom(), (0, 1), 10, make_env=GlobalRandom) == []
    made = []
    checker.check_interleaved(GoodEnv(), (0,), 3, make_env=lambda: made.append(1) or GoodEnv())
    assert made == [1, 1]


def test_an_env_that_cannot_be_copied_is_asked_for_make_env():
    class Uncopyable(GoodEnv):
        def __deepcopy__(self, memo):
            raise TypeError("holds a socket")

    problems = checker.check_interleaved(Uncopyable(), (0,), 3)
    assert len(problems) == 1 and "pass make_env=" in problems[0] and "holds a socket" in problems[0]
    assert roll_envs.check_env(Uncopyable(), make_env=Uncopyable) == []


def test_without_isolation_an_env_on_the_global_generators_is_not_reproducible():
    """What the isolation buys: the same env and seed, played twice on the process-wide generators."""
    env = GlobalRandom(max_steps=20)
    first, _ = checker.play(env, 0, 10)
    second, _ = checker.play(env, 0, 10)
    assert first != second
    isolated = roll_envs.IsolatedEnv(env)
    assert checker.play(isolated, 0, 10)[0] == checker.play(isolated, 0, 10)[0]


def test_invalid_names_from_valid_actions_are_reported():
    class Mismatch(GoodEnv):
        def match_action(self, token: str) -> str | None:
            return None

    assert any("was rejected as invalid" in p for p in checker.check_determinism(Mismatch(), (0,), 3))


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_builtins_pickle_mid_episode(env_id):
    import pickle

    env = roll_envs.make(env_id, **NO_CALLS.get(env_id, {}))
    env.reset(seed=5)
    env.step(f"<answer>{env.valid_actions[0]}</answer>")
    clone = pickle.loads(pickle.dumps(env))
    action = f"<answer>{env.valid_actions[-1]}</answer>"
    assert clone.step(action)[:4] == env.step(action)[:4]


def test_megabytes_of_garbage_are_an_invalid_action_with_the_penalty():
    env = roll_envs.make("frozen_lake", format_penalty=0.25)
    obs, _ = env.reset(seed=0)
    for text in [
        "x" * 5_000_000,
        "<answer>" * 300_000,
        "\x00\x01\x02" * 100_000,
        None,
        b"<answer>Left</answer>",
    ]:
        new_obs, reward, _, _, info = env.step(text)
        assert (new_obs, reward, info["action_is_valid"]) == (obs, -0.25, False)
        env.reset(seed=0)


def test_a_demonstration_is_followed_on_each_seed_and_checked_in_the_env_answer_format():
    played = []

    class Recorded(Demonstrates):
        def step(self, action: str):  # type: ignore[override]
            played.append(action)
            return super().step(action)

    assert (
        checker.check_demonstration(roll_envs.IsolatedEnv(Recorded(answer_format="boxed")), (0, 1), 3) == []
    )
    assert played == ["\\boxed{Go}"] * 6  # three turns from each seed, in the env's answer format
    wrong_format = Demonstrates(answer_format="boxed")
    wrong_format.demonstration = lambda: "<answer>Go</answer>"  # type: ignore[method-assign]
    problems = checker.check_demonstration(wrong_format, (0, 1), 3)
    assert len(problems) == 2 and all("'<answer>Go</answer>'" in p and "Demonstrates" in p for p in problems)
    assert checker.check_demonstration(GoodEnv(), (0,), 3) == []  # no expert: nothing to check
