"""Sokoban's planning references: the solver on hand-made rooms with shortest solutions worked out by hand,
the push rule on a room it must solve and one it must fail, the fixed-sequence search against trying every
sequence, the shortest-solution demonstration, and the `describe` line against hand-written ones."""

from __future__ import annotations

import itertools

import pytest
import roll_envs
from roll_envs.envs.sokoban import SokobanEnv
from roll_envs.envs.sokoban.baselines import fixed_sequence_success, held_out_rooms, room_graph
from roll_envs.envs.sokoban.generator import greedy_solvable
from roll_envs.envs.sokoban.push_rule import push_rule, read_grid
from roll_envs.envs.sokoban.rules import ACTIONS

ONE_PUSH = "#####\n#PXO#\n#####"
OPEN_ROOM = "######\n#P___#\n#_X__#\n#___O#\n######"
"""Down then Right twice (or Right twice then Down) for the box, with one step to the first pushing cell
and two between the pushing cells: 6 moves."""
DETOUR = "######\n##P__#\n##XO_#\n#___##\n#___##\n######"
"""The target is right of the box, but the cell left of the box is a wall: the box goes down, right and up
again (Down, then around the box to its left: Right Down Down Left Left Up, Right, then Down Right, Up): 11
moves. Every push that brings the box nearer its target is impossible from the start."""
LOOPING = "######\n#____#\n##___#\n###XP#\n##__O#\n######"
"""A room that needs a detour (validation seed 1000000002 with `needs_detour`, 14 moves): the rule pushes the
box up and down for ever."""
CORNERED = "#####\n#X_P#\n#O__#\n#####"
"""The box in a corner off the target: no solution."""


def play(grid: str, policy, turns: int) -> bool:
    env = SokobanEnv(render_mode=None)
    env.reset(options={"room": read_grid(grid)})
    for _ in range(turns):
        _, _, terminated, _, _ = env.step(env.format_answer(policy(env.text_observation())))
        if terminated:
            break
    return env.is_success()


@pytest.mark.parametrize(("grid", "moves"), [(ONE_PUSH, 1), (OPEN_ROOM, 6), (DETOUR, 11), (CORNERED, None)])
def test_solver_finds_the_hand_worked_shortest_solution(grid, moves):
    solution = room_graph(read_grid(grid)).solution
    assert (None if solution is None else len(solution)) == moves, solution
    if solution is not None:  # and it solves the room through the env
        assert play(grid, lambda _obs, moves=iter(solution): next(moves), len(solution))


def test_push_rule_solves_the_open_room_and_fails_the_detours():
    assert play(ONE_PUSH, push_rule, 1)
    assert play(OPEN_ROOM, push_rule, 6)  # greedy pushes with the shortest walks are optimal here
    # no improving push: the nearest other one (Down), then the nearest improving one pushes the box back
    assert not play(DETOUR, push_rule, 100)
    assert greedy_solvable(read_grid(OPEN_ROOM)) and not greedy_solvable(read_grid(LOOPING))
    assert not play(LOOPING, push_rule, 100)


def test_push_rule_reads_another_grid_vocabulary():
    grid = OPEN_ROOM.translate(str.maketrans("#_OXP", "W.TBA"))
    vocab = roll_envs.make("sokoban_different_grid_vocab").config.grid_vocab
    assert push_rule(grid, vocab) == push_rule(OPEN_ROOM)


def brute_force_fixed(seeds: range, turns: int) -> float:
    """The most rooms any one sequence of `turns` moves solves, trying all 4**turns on the env's own moves."""
    env = SokobanEnv(render_mode=None)
    rooms = []
    for seed in seeds:
        env.reset(seed=seed)
        rooms.append(env.room)
    best = 0
    for sequence in itertools.product(ACTIONS, repeat=turns):
        solved = 0
        for room in rooms:
            env.room, env.player, env.boxes = room, room.player, set(room.boxes)
            for move in sequence:
                if env.apply_action(move).terminated:
                    break
            solved += env.is_success()
        best = max(best, solved)
    return best / len(seeds)


def test_fixed_sequence_search_matches_trying_every_sequence():
    seeds = range(1_000_000, 1_000_016)
    graphs = [room_graph(room) for room in held_out_rooms(0, seeds=seeds)]
    found, sequence = fixed_sequence_success(graphs, 5)
    assert len(sequence) == 5
    assert found == brute_force_fixed(seeds, 5) > 0


def test_baselines_name_rule_fixed_and_optimum_on_the_same_rooms():
    env = roll_envs.make("sokoban", describe=True, render_mode=None)
    found = env.baselines(turns=8, seeds=range(1_000_000, 1_000_030))
    assert list(found.success) == ["random", "best_fixed_sequence", "push_rule", "optimal"]
    success = found.success
    assert success["random"] < success["best_fixed_sequence"] < success["push_rule"] <= success["optimal"]
    assert "best_fixed_10_moves" in env.baselines(turns=12, seeds=range(1_000_000, 1_000_010)).success


@pytest.mark.parametrize("seed", range(5))
def test_demonstration_plays_a_shortest_solution(seed):
    env = roll_envs.make("sokoban", render_mode=None)
    env.reset(seed=seed)
    shortest = len(room_graph(env.room).solution)
    for _ in range(shortest):
        env.step(env.demonstration())
    assert env.is_success()
    assert env.demonstration() is None


@pytest.mark.parametrize(
    ("grid", "line"),
    [
        (
            DETOUR,
            "You are at row 2, column 3. The box is at row 3, column 3, the target at row 3, column 4: the box"
            " must go Right 1. Up: wall, Down: push the box onto floor, Left: wall, Right: floor.",
        ),
        (
            "######\n#_P__#\n#_X__#\n#_X_O#\n#__O_#\n######",
            "You are at row 2, column 3. Boxes at row 3, column 3; row 4, column 3. Free targets at row 4,"
            " column 5; row 5, column 4. Up: wall, Down: a box that cannot move, Left: floor, Right: floor.",
        ),
        (
            "#####\n#P√_#\n#####",
            "You are at row 2, column 2. Boxes at row 2, column 3 (on a target). Up: wall, Down: wall, Left:"
            " wall, Right: push the box onto floor.",
        ),
    ],
)
def test_describe_line_is_the_hand_written_one(grid, line):
    env = SokobanEnv(describe=True, render_mode=None)
    observation, _ = env.reset(options={"room": read_grid(grid)})
    assert observation == f"{grid}\n{line}"
    assert "Below the map, a line says" in env.instruction
    assert "Below the map" not in SokobanEnv().instruction


def test_greedy_solvable_tells_the_detour_room_from_the_open_one():
    assert greedy_solvable(read_grid(OPEN_ROOM)) and greedy_solvable(read_grid(ONE_PUSH))
    assert not greedy_solvable(read_grid(DETOUR)) and not greedy_solvable(read_grid(LOOPING))
    assert not greedy_solvable(read_grid(CORNERED))  # no solution at all


def test_needs_detour_draws_solvable_rooms_no_greedy_pushes_solve():
    env = roll_envs.make("sokoban", needs_detour=True, render_mode=None)
    for seed in range(4):
        env.reset(seed=seed)
        room = env.room
        assert not greedy_solvable(room), seed
        assert room_graph(room).solution is not None, seed  # reverse play: solvable by construction
        env.reset(seed=seed)
        assert env.room == room  # the same seed, the same room
