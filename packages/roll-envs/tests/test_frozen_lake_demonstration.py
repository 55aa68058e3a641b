"""FrozenLake's demonstration: the first move of a shortest path to the goal, checked against an
iterative-deepening search written here (its own moves, not `rules.move`)."""

from __future__ import annotations

import numpy as np
import pytest
import roll_envs
from roll_envs.envs.frozen_lake import (
    ACTIONS,
    FrozenLakeEnv,
    generate_map,
    has_path,
    shortest_path_moves,
)

STEPS = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}


def reference_path(desc: list[str], start: tuple[int, int]) -> list[str] | None:
    """The first (in ACTIONS order) of the shortest move sequences from `start` to a goal that enter no
    hole, by iterative deepening over every sequence that never revisits a cell (a move into the edge or
    back to a visited cell cannot be on a shortest path)."""

    def search(here: tuple[int, int], depth: int, seen: set[tuple[int, int]]) -> list[str] | None:
        if desc[here[0]][here[1]] == "G":
            return []
        if depth == 0:
            return None
        for name in ACTIONS:  # ACTIONS order: the first sequence found at the least depth is the first
            r, c = here[0] + STEPS[name][0], here[1] + STEPS[name][1]
            if not (0 <= r < len(desc) and 0 <= c < len(desc[0])) or (r, c) in seen or desc[r][c] == "H":
                continue
            rest = search((r, c), depth - 1, seen | {(r, c)})
            if rest is not None:
                return [name, *rest]
        return None

    for depth in range(len(desc) * len(desc[0])):
        if (found := search(start, depth, {start})) is not None:
            return found
    return None


def _start(desc: list[str]) -> tuple[int, int]:
    return divmod("".join(desc).index("S"), len(desc[0]))


def test_the_reference_search_on_a_hand_made_map():
    desc = ["SFFF", "HHHF", "GFFF"]
    assert reference_path(desc, (0, 0)) == ["Right", "Right", "Right", "Down", "Down", "Left", "Left", "Left"]
    assert reference_path(["SH", "HG"], (0, 0)) is None


@pytest.mark.parametrize(("size", "p", "maps"), [(4, 0.8, 300), (3, 0.6, 100), (5, 0.7, 60)])
def test_shortest_path_moves_match_the_iterative_deepening_search(size, p, maps):
    lengths = set()
    for seed in range(maps):
        desc = generate_map(np.random.default_rng(seed), size, p)
        start = _start(desc)
        moves = shortest_path_moves(desc, start[0] * size + start[1])
        assert moves == reference_path(desc, start), (seed, desc)
        lengths.add(len(moves))
    assert len(lengths) > 3  # near and far goals both tested


def test_ties_go_to_the_first_move_in_actions_order():
    assert shortest_path_moves(["SF", "FG"], 0) == ["Down", "Right"]  # Down before Right
    assert shortest_path_moves(["GF", "FS"], 3) == ["Left", "Up"]  # Left before Up
    assert shortest_path_moves(["FG", "SF"], 2) == ["Right", "Up"]  # Right before Up
    assert shortest_path_moves(["SG"], 1) == []  # on the goal
    assert shortest_path_moves(["SH", "HG"], 0) is None  # walled off
    assert shortest_path_moves(["HG"], 0) is None  # in a hole


def test_has_path_agrees_with_shortest_path_moves():
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(300):
        board = [["F" if cell else "H" for cell in row] for row in (rng.random((4, 4)) < 0.55).tolist()]
        start, goal = (int(x) for x in rng.choice(16, 2, replace=False))
        board[start // 4][start % 4], board[goal // 4][goal % 4] = "S", "G"
        reachable = has_path(board, start, goal)
        assert reachable == (shortest_path_moves(board, start) is not None)
        outcomes.add(reachable)
    assert outcomes == {True, False}


def _follow(env: FrozenLakeEnv, seed: int) -> tuple[int, float, dict]:
    """Reset with `seed` and play `demonstration()` until the episode ends; (steps, last reward, last info)."""
    env.reset(seed=seed)
    steps, reward, info = 0, 0.0, {}
    while (answer := env.demonstration()) is not None:
        _, reward, terminated, truncated, info = env.step(answer)
        steps += 1
        assert info["action_is_valid"] and info["action_is_effective"], (seed, answer)
        if terminated or truncated:
            break
    return steps, reward, info


def test_following_the_demonstration_reaches_the_goal_in_the_fewest_moves():
    env = FrozenLakeEnv(max_steps=100)
    for seed in range(250):
        env.reset(seed=seed)
        fewest = len(reference_path(env.desc, _start(env.desc)))
        steps, reward, info = _follow(env, seed)
        assert (steps, reward, info["success"]) == (fewest, 1.0, True), seed
        assert env.demonstration() is None  # on the goal: the episode has ended


def test_the_demonstration_is_none_once_the_episode_has_ended():
    env = FrozenLakeEnv()
    env.reset(options={"map": ["SH", "FG"]})
    assert env.demonstration() == "<answer>Down</answer>"
    env.step("<answer>Right</answer>")  # into the hole
    assert env.demonstration() is None
    env = FrozenLakeEnv(max_steps=1)
    env.reset(options={"map": ["SFF", "FFF", "FFG"]})
    *_, truncated, _ = env.step("<answer>Up</answer>")
    assert truncated and env.demonstration() is None
    env.reset(options={"map": ["SH", "HG"]})  # no path (a given map need not have one)
    assert env.demonstration() is None
    assert FrozenLakeEnv().demonstration() is None  # before reset


@pytest.mark.parametrize(("answer_format", "opening"), [("tool_call", '{"name": '), ("boxed", "\\boxed{")])
def test_the_demonstration_is_written_in_the_env_answer_format(answer_format, opening):
    env = FrozenLakeEnv(answer_format=answer_format, max_steps=100)
    plain = FrozenLakeEnv(max_steps=100)
    for seed in range(30):
        env.reset(seed=seed)
        plain.reset(seed=seed)
        move = plain.demonstration().removeprefix("<answer>").removesuffix("</answer>")
        assert env.demonstration() == env.format_answer(move) and env.demonstration().startswith(opening)
        assert _follow(env, seed)[1:] == _follow(plain, seed)[1:]


def test_on_slippery_ice_the_demonstration_is_the_shortest_path_move():
    slippery = FrozenLakeEnv(is_slippery=True, max_steps=100)
    for seed in range(50):
        slippery.reset(seed=seed)
        for _ in range(6):
            answer = slippery.demonstration()
            if answer is None:
                break
            first = shortest_path_moves(slippery.desc, slippery.position)[0]
            assert answer == f"<answer>{first}</answer>"
            if slippery.step(answer)[2]:
                break


def test_the_default_hook_has_no_expert():
    env = roll_envs.make("tictactoe")
    env.reset(seed=0)
    assert type(env).demonstration is roll_envs.BaseEnv.demonstration and env.demonstration() is None
