"""Sokoban baselines: the exact random-policy DP against Monte-Carlo play of the real env, the BFS optimum
against brute force and against replaying its path through `SokobanEnv`."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import roll_envs
from roll_envs.baseline_types import HELD_OUT_SEED_START
from roll_envs.baselines import env_baselines
from roll_envs.envs.frozen_lake.baselines import frozen_lake_baselines
from roll_envs.envs.sokoban import Room, SokobanEnv
from roll_envs.envs.sokoban.baselines import (
    _held_out_graphs,
    held_out_rooms,
    random_policy_success,
    room_graph,
    sokoban_baselines,
)
from roll_envs.envs.sokoban.env import ACTIONS


def monte_carlo_random_success(seeds: range, turns: int, episodes: int, rng: np.random.Generator) -> float:
    """Uniformly random answers played through the real env, `turns` turns per episode."""
    env = SokobanEnv(max_steps=turns, render_mode=None)
    wins = 0
    for seed in seeds:
        for _ in range(episodes):
            env.reset(seed=seed)
            for move in rng.integers(0, 4, turns):
                _, _, terminated, truncated, info = env.step(f"<answer>{ACTIONS[move]}</answer>")
                if terminated or truncated:
                    break
            wins += info["success"]
    return wins / (len(seeds) * episodes)


def brute_force_moves(room: Room, limit: int) -> int | None:
    """Fewest moves that solve `room`, trying every move sequence up to `limit` on the env's own rules."""
    env = SokobanEnv(render_mode=None)
    env.reset(options={"room": room})

    def solvable_in(depth: int) -> bool:
        if env.is_success():
            return True
        if depth == 0:
            return False
        for action in ACTIONS:
            player, boxes = env.player, set(env.boxes)
            env.apply_action(action)
            found = solvable_in(depth - 1)
            env.player, env.boxes = player, boxes
            if found:
                return True
        return False

    return next((depth for depth in range(limit + 1) if solvable_in(depth)), None)


@pytest.mark.parametrize("env_id", ["sokoban", "larger_sokoban", "sokoban_different_grid_vocab"])
def test_held_out_rooms_are_the_rooms_the_env_plays(env_id):
    env = roll_envs.make(env_id, render_mode=None)
    rooms = held_out_rooms(30, env.config)
    for seed, room in zip(range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 30), rooms, strict=True):
        env.reset(seed=seed)
        assert env.room == room, seed


def test_random_policy_dp_matches_monte_carlo_of_the_real_env():
    seeds = range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 25)
    turns = 8
    exact = random_policy_success([room_graph(r) for r in held_out_rooms(len(seeds))], turns)
    sampled = monte_carlo_random_success(seeds, turns, 200, np.random.default_rng(0))
    # 5000 episodes: the standard error of the sampled mean is below 0.007
    assert abs(sampled - exact) < 0.02, (sampled, exact)


def test_random_policy_success_grows_with_the_cap_from_zero():
    graphs = list(_held_out_graphs(200, 6, 6, 1, 100))
    values = [random_policy_success(graphs, turns) for turns in (0, 1, 5, 20, 60)]
    assert values[0] == 0.0  # no room starts solved
    assert all(a < b for a, b in itertools.pairwise(values))
    one_move = np.mean([len(g.solution) == 1 for g in graphs]) / 4  # one right move in four
    assert values[1] == pytest.approx(one_move)


def test_bfs_optimum_equals_brute_force_on_small_rooms():
    rooms = held_out_rooms(60)
    checked = 0
    for room in rooms:
        solution = room_graph(room).solution
        assert solution is not None
        if len(solution) <= 6:
            assert brute_force_moves(room, 6) == len(solution)
            checked += 1
    assert checked >= 40


def test_bfs_path_solves_the_real_env_in_exactly_that_many_moves():
    env = roll_envs.make("sokoban", render_mode=None)
    for seed in range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 200):
        env.reset(seed=seed)
        solution = room_graph(env.room).solution
        for i, move in enumerate(solution, start=1):
            _, _, terminated, _, info = env.step(f"<answer>{move}</answer>")
            assert terminated == (i == len(solution)) and info["success"] == terminated, (seed, i)


def test_a_room_with_no_solution_has_none():
    # the box is in a corner: it can never be pushed out
    room = Room(6, 6, frozenset({7, 8, 9, 13, 14, 15}), frozenset({15}), frozenset({7}), 14)
    graph = room_graph(room)
    assert graph.solution is None and not graph.solved.any()
    assert random_policy_success([graph], 20) == 0.0


def test_baselines_at_a_cap_and_their_speed():
    _held_out_graphs.cache_clear()
    start = time.perf_counter()
    result = sokoban_baselines(1000, 30)
    assert time.perf_counter() - start < 5.0
    assert result["unsolvable"] == 0.0 and result["optimal"] == 1.0
    assert 3.0 < result["optimal_moves_mean"] < 5.0 and result["optimal_moves_max"] <= 30
    assert 0.2 < result["random"] < 0.5
    lengths = [len(g.solution) for g in _held_out_graphs(1000, 6, 6, 1, 100)]
    short = sokoban_baselines(1000, 5)
    assert short["optimal"] == pytest.approx(np.mean([n <= 5 for n in lengths]))
    assert short["random"] < result["random"]
    start = time.perf_counter()
    sokoban_baselines(1000, 20)  # another cap: the graphs come from the cache
    assert time.perf_counter() - start < 0.5


def test_env_baselines_dispatch_on_the_env():
    frozen = env_baselines(roll_envs.make("frozen_lake"), 8, episodes=200)
    assert frozen is not None and frozen.env == "FrozenLake"
    assert frozen.success == frozen_lake_baselines(200, 8)
    assert env_baselines(roll_envs.make("frozen_lake", is_slippery=True), 8) is None  # the DP assumes no slip
    assert env_baselines(roll_envs.make("taxi"), 8) is None
    plain = env_baselines(roll_envs.make("sokoban"), 30, episodes=100)
    other = env_baselines(roll_envs.make("sokoban_different_grid_vocab"), 30, episodes=100)
    assert plain is not None and plain.success == other.success  # the same rooms, other symbols
    assert plain.success["optimal"] == 1.0 and "at most" in plain.note
    larger = env_baselines(roll_envs.make("larger_sokoban"), 30, episodes=20)
    assert larger is not None and larger.success["random"] < plain.success["random"]
