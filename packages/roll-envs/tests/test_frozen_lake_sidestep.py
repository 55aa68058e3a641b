"""FrozenLake's `needs_sidestep`: only maps that the walk towards the goal's row first, then its column, loses,
checked by playing that walk in the env from what its description says, and by a path to the goal existing."""

from __future__ import annotations

import re

import numpy as np
import roll_envs
from roll_envs.envs.frozen_lake import generate_map, shortest_path_moves
from roll_envs.envs.frozen_lake.baselines import frozen_lake_baselines


def row_first_move(observation: str) -> str:
    """The move towards the goal's row, else towards its column, read off the line in words."""
    here, goal = re.findall(r"row (\d+), column (\d+)", observation)[:2]
    (row, col), (goal_row, goal_col) = map(int, here), map(int, goal)
    if row != goal_row:
        return "Down" if goal_row > row else "Up"
    return "Right" if goal_col > col else "Left"


def play_row_first(env: roll_envs.BaseEnv, seed: int) -> tuple[bool, bool]:
    """(reached the goal, fell into a hole) for the row-first walk on the map of `seed`."""
    observation, _ = env.reset(seed=seed)
    for _ in range(8):
        observation, _, terminated, _, _ = env.step(f"<answer>{row_first_move(observation)}</answer>")
        if terminated:
            break
    return env.is_success(), "fell into a hole" in observation


def test_every_map_is_lost_by_the_row_first_walk_and_has_a_path() -> None:
    env = roll_envs.make("frozen_lake", describe=True, needs_sidestep=True)
    for seed in range(60):
        won, fell = play_row_first(env, seed)
        assert not won and fell, seed
        env.reset(seed=seed)
        assert shortest_path_moves(env.desc, env.position), seed


def test_default_maps_are_unchanged_and_the_walk_wins_most() -> None:
    env = roll_envs.make("frozen_lake", describe=True)
    results = [play_row_first(env, seed) for seed in range(200)]
    assert all(won != fell for won, fell in results)  # 4x4 at 8 moves: the walk ends in the goal or a hole
    assert 0.6 < sum(won for won, _ in results) / len(results) < 0.9
    # the flag off draws exactly as before it existed: these maps are what generate_map drew at e600457
    before = {
        0: ["FSFF", "HHFF", "FHHF", "HGFF"],
        1: ["FFFF", "FFHS", "FFFF", "GFFF"],
        2: ["FFHF", "FFFF", "FFFF", "FFSG"],
    }
    for seed, rows in before.items():
        assert generate_map(np.random.default_rng(seed)) == rows
        env.reset(seed=seed)
        assert list(env.desc) == rows


def test_baselines_are_scored_on_the_maps_the_env_plays() -> None:
    seeds = list(range(64))
    sidestep = roll_envs.make("frozen_lake", describe=True, needs_sidestep=True)
    rates = sidestep.baselines(6, seeds=seeds).success
    default = frozen_lake_baselines(len(seeds), 6, seeds=seeds)
    assert rates["random"] != default["random"]
    assert (
        rates["best_fixed_sequence"]
        == frozen_lake_baselines(len(seeds), 6, seeds=seeds, needs_sidestep=True)["best_fixed_sequence"]
    )
