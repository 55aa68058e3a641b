"""Baselines through the env hook: `env_baselines` / `has_baselines` ask the env itself, so a third-party
env provides its own, scored on the seeds given when its hook takes them; an env without the hook has none;
the built-ins answer as before."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import roll_envs
import roll_envs.baselines as generic
from roll_envs import ActionOutcome, BaseEnv, EnvBaselines, env_baselines, registry
from roll_envs.baselines import HELD_OUT_SEED_START, distinct_observations, has_baselines
from roll_envs.envs.frozen_lake import baselines as frozen_lake_module


class CoinEnv(BaseEnv):
    """Guess a coin flip: one turn, Heads or Tails. No baselines hook."""

    @property
    def instruction(self) -> str:
        return "Guess the coin: <answer>Heads</answer> or <answer>Tails</answer>."

    @property
    def valid_actions(self) -> list[str]:
        return ["Heads", "Tails"]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.coin, self.won = ("Heads", "Tails")[int(rng.integers(2))], False

    def apply_action(self, action: str) -> ActionOutcome:
        self.won = action == self.coin
        return ActionOutcome(float(self.won), True, True)

    def text_observation(self) -> str:
        return "The coin is in the air."

    def is_success(self) -> bool:
        return self.won


def always_heads(env: CoinEnv, turns: int, seeds: Sequence[int]) -> EnvBaselines:
    """The coin's baselines: how often always guessing Heads wins on the episodes of `seeds`."""
    wins = 0
    for seed in seeds:
        env.reset(seed=seed)
        wins += env.coin == "Heads"
    note = "A policy at one half does not read the coin (it cannot)."
    return EnvBaselines("Coin", "flips", turns, {"always_heads": wins / len(seeds)}, note, {})


class CoinEnvWithBaselines(CoinEnv):
    """The same game with the hook, which takes no seeds: always Heads, counted on the held-out seeds."""

    calls: ClassVar[list[tuple[int, int]]] = []

    def baselines(self, turns: int, episodes: int = 1000) -> EnvBaselines:
        type(self).calls.append((turns, episodes))
        return always_heads(self, turns, range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes))


class CoinEnvWithSeeds(CoinEnv):
    """The same game with the hook that takes the seeds to score (the held-out seeds when none are given)."""

    seen: ClassVar[list[tuple[int, ...]]] = []

    def baselines(self, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None) -> EnvBaselines:
        played = tuple(range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes) if seeds is None else seeds)
        type(self).seen.append(played)
        return always_heads(self, turns, played)


def test_a_custom_env_provides_its_baselines_through_the_hook():
    CoinEnvWithBaselines.calls.clear()
    env = CoinEnvWithBaselines()
    assert env.has_baselines and has_baselines(env) and roll_envs.has_baselines(env)
    assert CoinEnvWithBaselines.calls == []  # has_baselines computes nothing
    found = env_baselines(env, turns=1, episodes=400)
    assert CoinEnvWithBaselines.calls == [(1, 400)]
    assert isinstance(found, EnvBaselines) and (found.env, found.episodes, found.turns) == (
        "Coin",
        "flips",
        1,
    )
    assert set(found.success) == {"always_heads"} and 0.4 < found.success["always_heads"] < 0.6
    assert found == generic.env_baselines(env, 1, 400)  # the same entry point under both names


def test_a_third_party_hook_gets_the_seeds():
    CoinEnvWithSeeds.seen.clear()
    found = env_baselines(CoinEnvWithSeeds(), 1, seeds=[5, 6, 7])
    assert CoinEnvWithSeeds.seen == [(5, 6, 7)] and found.seeds == (5, 6, 7)
    assert distinct_observations(CoinEnvWithSeeds(), [5, 6, 7]) == 1


def test_a_hook_that_takes_no_seeds_says_how_to_take_them():
    env = CoinEnvWithBaselines()
    assert env_baselines(env, 1, episodes=10).seeds == tuple(
        range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 10)
    )
    with pytest.raises(
        TypeError, match=r"CoinEnvWithBaselines\.baselines.*takes no seeds.*seeds: Sequence\[int\]"
    ):
        env_baselines(env, 1, seeds=[1, 2])


def test_a_registered_custom_env_with_the_hook_is_found_by_id():
    roll_envs.register("coin_with_baselines", CoinEnvWithBaselines, override=True)
    try:
        env = roll_envs.make("coin_with_baselines", render_mode=None)
        assert has_baselines(env) and env_baselines(env, 1, episodes=10).env == "Coin"
    finally:
        registry._REGISTRY.pop("coin_with_baselines", None)


class CoinEnvWithLooseBaselines(CoinEnv):
    """A hook that returns a bare dict of rates instead of `EnvBaselines`."""

    def baselines(self, turns: int, episodes: int = 1000) -> Any:
        return {"always_heads": 0.5}


def test_a_hook_returning_something_else_is_a_clear_error():
    with pytest.raises(
        TypeError, match=r"CoinEnvWithLooseBaselines\.baselines must return roll_envs\.EnvBaselines"
    ):
        env_baselines(CoinEnvWithLooseBaselines(), turns=1)


def test_an_env_without_the_hook_reports_none():
    env = CoinEnv()
    assert not env.has_baselines and not has_baselines(env)
    assert env.baselines(1) is None and env_baselines(env, 1) is None
    for env_id in ("taxi", "cliff_walking", "webshop_lite"):
        assert not has_baselines(roll_envs.make(env_id, render_mode=None)), env_id
    assert not has_baselines(object()) and env_baselines(object(), 8) is None  # not a BaseEnv


@pytest.mark.parametrize(
    ("env_id", "overrides", "expected"),
    [
        ("frozen_lake", {}, True),
        ("frozen_lake", {"size": 5, "p": 0.7}, True),
        ("frozen_lake", {"is_slippery": True}, False),  # the dynamic programming assumes no slip
        ("sokoban", {}, True),
        ("simple_sokoban", {}, True),
        ("larger_sokoban", {}, True),
        ("sokoban_different_grid_vocab", {}, True),
    ],
)
def test_the_builtins_say_whether_they_have_baselines(env_id, overrides, expected):
    env = roll_envs.make(env_id, render_mode=None, **overrides)
    assert env.has_baselines is expected and has_baselines(env) is expected
    if not expected:
        assert env.baselines(8) is None and env_baselines(env, 8) is None


def test_the_frozen_lake_hook_returns_its_baselines():
    env = roll_envs.make("frozen_lake", render_mode=None)
    found = env.baselines(8, episodes=200)
    assert found == env_baselines(env, 8, episodes=200)
    assert (found.env, found.episodes, found.turns, found.details) == ("FrozenLake", "maps", 8, {})
    assert found.success == roll_envs.frozen_lake_baselines(200, 8)


def test_frozen_lake_baseline_names_stay_importable_from_roll_envs_baselines():
    for name in (
        "PRECOMPUTED_SEQUENCES",
        "best_fixed_sequence",
        "frozen_lake_baselines",
        "goal_distances",
        "random_policy_success",
        "sequence_success",
        "transition_table",
    ):
        assert getattr(generic, name) is getattr(frozen_lake_module, name), name
    assert generic.HELD_OUT_SEED_START == frozen_lake_module.HELD_OUT_SEED_START == 1_000_000
