"""Benchmarks of reset and step of every built-in roll env (pytest-benchmark).

Run with `uv run pytest benchmarks/test_bench_envs.py --benchmark-enable`; the default run
disables timing and executes each benchmark once as a test.
"""

from __future__ import annotations

import itertools

import pytest
import roll_envs

STEP_ACTIONS = {
    "frozen_lake": "<answer>Left</answer>",
    "simple_sokoban": "<answer>Up</answer>",
    "larger_sokoban": "<answer>Up</answer>",
    "sokoban_different_grid_vocab": "<answer>Up</answer>",
    "webshop_lite": "<answer>search[machine washable hoodie navy blue]</answer>",
    "cliff_walking": "<answer>Up</answer>",
    "taxi": "<answer>Up</answer>",
}
"""A representative turn per env, played from the state right after reset."""


@pytest.mark.parametrize("env_id", sorted(STEP_ACTIONS))
def test_bench_reset(benchmark, env_id):
    env = roll_envs.make(env_id)
    seeds = itertools.count()
    obs, info = benchmark(lambda: env.reset(seed=next(seeds)))
    assert isinstance(obs, str) and info["success"] is False


@pytest.mark.parametrize("env_id", sorted(STEP_ACTIONS))
def test_bench_step(benchmark, env_id):
    env = roll_envs.make(env_id, max_steps=1000)
    seeds = itertools.count()

    def setup():
        env.reset(seed=next(seeds))
        return (STEP_ACTIONS[env_id],), {}

    result = benchmark.pedantic(env.step, setup=setup, rounds=300, iterations=1, warmup_rounds=5)
    assert result[4]["action_is_valid"]


def test_bench_parse_turn(benchmark):
    text = "<think>the goal is two cells down</think><answer> Down || Down </answer><|im_end|>"
    turn = benchmark(roll_envs.parse_turn, text, ["Left", "Down", "Right", "Up"], 2)
    assert turn.actions == ("Down", "Down")


def test_bench_frozen_lake_baselines(benchmark):
    result = benchmark.pedantic(
        roll_envs.frozen_lake_baselines, kwargs={"episodes": 1000}, rounds=3, iterations=1
    )
    assert set(result) == {"random", "best_fixed_sequence"}
