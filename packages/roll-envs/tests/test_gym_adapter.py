"""Gymnasium adapter: CliffWalking and Taxi out of the box, dynamics passed through, custom renderers."""

from __future__ import annotations

import gymnasium as gym
import pytest
import roll_envs
from roll_envs.adapters.gym import GymAdapterEnv, latest_gym_id


def test_cliff_walking_text_and_rewards_match_gymnasium():
    env = roll_envs.make("cliff_walking")
    ref = gym.make(latest_gym_id("CliffWalking")).unwrapped
    obs, _ = env.reset(seed=0)
    assert obs.splitlines()[-1] == "PCCCCCCCCCCG"
    ref.reset(seed=0)
    for a in [0, 1, 1, 2, 2, 1, 3, 0] + [1] * 12 + [2]:
        s, r, term, _, _ = ref.step(a)
        obs, reward, terminated, _, info = env.step(f"<answer>{env.valid_actions[a]}</answer>")
        assert reward == r and terminated == term
        row, col = divmod(s, 12)
        assert obs.splitlines()[row][col] == "P"
        if term:
            assert info["success"]
            break


def test_taxi_pickup_dropoff_by_name_and_success():
    env = roll_envs.make("taxi")
    obs, _ = env.reset(seed=0)
    assert "Passenger:" in obs and "T" in obs and "Pickup" in env.instruction
    _, reward, *_ = env.step("<answer>pickup</answer>")
    assert reward == -10.0  # a wrong pickup, as in Gymnasium


def test_any_discrete_env_with_a_render_function():
    env = GymAdapterEnv(
        gym_env=gym.make("Blackjack-v1"),
        render_fn=lambda e, o: f"your sum {o[0]}, dealer shows {o[1]}",
        action_names=["Stick", "Hit"],
        instruction="Beat the dealer without going over 21.",
        format_penalty=1.0,  # a lost hand scores -1: garbage must not score more (check_env warns otherwise)
    )
    obs, _ = env.reset(seed=3)
    assert obs.startswith("your sum") and "Stick, Hit" in env.instruction
    assert roll_envs.check_env(env) == []


def test_adapter_errors_are_helpful():
    with pytest.raises(roll_envs.EnvConfigError, match="set gym_id"):
        roll_envs.make("gym_adapter")
    with pytest.raises(roll_envs.EnvConfigError, match="Discrete"):
        GymAdapterEnv(gym_id="MountainCarContinuous-v0")
    with pytest.raises(roll_envs.EnvConfigError, match="action_names has 2"):
        GymAdapterEnv(gym_id=latest_gym_id("Taxi"), action_names=["a", "b"])
    with pytest.raises(roll_envs.EnvConfigError, match="does not load"):
        GymAdapterEnv(gym_id=latest_gym_id("Taxi"), renderer="nowhere:render")
