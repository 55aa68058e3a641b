"""The example plugin under examples/custom_env, imported from its source tree (the wheel test installs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import roll_envs
from roll_envs import registry

EXAMPLE_SRC = Path(__file__).resolve().parents[3] / "examples" / "custom_env" / "src"


@pytest.fixture
def guess_env_cls(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    from guess_number_env.env import GuessNumberEnv

    yield GuessNumberEnv
    sys.modules.pop("guess_number_env.env", None)
    sys.modules.pop("guess_number_env", None)


def test_example_env_passes_check_env(guess_env_cls):
    env = guess_env_cls(max_number=10)
    assert roll_envs.check_env(env) == []
    obs, _ = env.reset(seed=1)
    low, high = 1, 10
    for _ in range(10):  # binary search solves it
        guess = (low + high) // 2
        obs, reward, terminated, _, info = env.step(f"<answer> {guess} </answer>")
        if terminated:
            break
        low, high = (guess + 1, high) if "higher" in obs else (low, guess - 1)
    assert info["success"] and reward == 1.0


def test_example_registered_by_entry_point_string(guess_env_cls):
    roll_envs.register("guess_number_src", "guess_number_env.env:GuessNumberEnv")
    try:
        env = roll_envs.make("guess_number_src", max_number=4)
        assert "between 1 and 4" in env.instruction
        with pytest.raises(roll_envs.EnvConfigError, match="max_number"):
            roll_envs.make("guess_number_src", max_number=1)
    finally:
        registry._REGISTRY.pop("guess_number_src", None)
