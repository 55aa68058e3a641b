"""Sokoban: generated rooms are solvable (proved by a BFS written apart from the env's) and never start solved;
rules and rewards."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
import roll_envs
from roll_envs.envs.sokoban import ALTERNATIVE_GRID, Room, SokobanEnv, generate_room

VARIANTS = {  # registry id, config, (height, width, boxes)
    "simple_sokoban": ("simple_sokoban", {}, (6, 6, 1)),
    "larger_sokoban": ("larger_sokoban", {}, (8, 8, 2)),
    "sokoban_different_grid_vocab": ("sokoban_different_grid_vocab", {}, (6, 6, 1)),
    "sokoban_10x10": ("sokoban", {"dim_x": 10, "dim_y": 10, "num_boxes": 2}, (10, 10, 2)),
}


MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def solve(room: Room) -> list[str] | None:
    """Shortest move sequence, by breadth-first search over (player, boxes) as (row, column) squares: the rules
    as stated (a move into a box pushes it onto free floor; nothing else moves), written apart from the env's
    flat-index code (`room_graph`)."""

    def at(cell: int) -> tuple[int, int]:
        return divmod(cell, room.width)

    floor, goal = {at(c) for c in room.floor}, tuple(sorted(at(c) for c in room.targets))
    ways = {  # from each floor square: (move, the square it enters, the square a box there is pushed onto)
        (r, c): [
            (m, (r + dr, c + dc), (r + 2 * dr, c + 2 * dc))
            for m, (dr, dc) in MOVES.items()
            if (r + dr, c + dc) in floor
        ]
        for r, c in floor
    }
    start = (at(room.player), tuple(sorted(at(c) for c in room.boxes)))
    came_from: dict[tuple, tuple | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        player, boxes = state
        if boxes == goal:
            moves = []
            while came_from[state] is not None:
                state, move = came_from[state]
                moves.insert(0, move)
            return moves
        for move, step, push in ways[player]:
            if step in boxes:
                if push not in floor or push in boxes:
                    continue
                after = (step, tuple(sorted(push if b == step else b for b in boxes)))
            else:
                after = (step, boxes)
            if after not in came_from:
                came_from[after] = (state, move)
                frontier.append(after)
    return None


def room_from_text(rows: list[str]) -> Room:
    """A room from the default text grid (for hand-written test levels)."""
    w = len(rows[0])
    cells = "".join(rows)
    return Room(
        height=len(rows),
        width=w,
        floor=frozenset(i for i, ch in enumerate(cells) if ch != "#"),
        targets=frozenset(i for i, ch in enumerate(cells) if ch in "O√S"),
        boxes=frozenset(i for i, ch in enumerate(cells) if ch in "X√"),
        player=next(i for i, ch in enumerate(cells) if ch in "PS"),
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_generated_room_is_solvable_and_not_solved(variant):
    """Proof over 3000 seeds per variant: an independent BFS solves each room from `env.reset(seed)`."""
    env_id, config, (h, w, n) = VARIANTS[variant]
    assert solve(room_from_text(["#####", "#PXO#", "#####"])) == ["Right"]  # the reference on known answers
    assert solve(room_from_text(["#####", "#P_X#", "#__O#", "#####"])) is None  # a box in a corner
    assert solve(room_from_text(["######", "#_X_O#", "#P___#", "######"])) == ["Up", "Right", "Right"]
    env = roll_envs.make(env_id, **config)
    lengths = []
    for seed in range(3000):
        env.reset(seed=seed)
        room = env.room
        assert room is not None and len(room.boxes) == n == len(room.targets)
        assert not room.is_solved(), seed
        assert room.player in room.floor and room.player not in room.boxes
        assert all(0 < c // w < h - 1 and 0 < c % w < w - 1 for c in room.floor)  # walled all round
        solution = solve(room)
        assert solution, f"seed {seed} of {variant} is unsolvable"
        lengths.append(len(solution))
    assert np.mean(lengths) > 3  # not all trivial


def test_solutions_replayed_through_the_env_solve_it_with_the_right_return():
    env = SokobanEnv(num_boxes=2, dim_x=8, dim_y=8)
    for seed in range(50):
        env.reset(seed=seed)
        solution = solve(env.room)
        total, terminated, info = 0.0, False, {}
        for move in solution:
            _, reward, terminated, _, info = env.step(f"<answer>{move}</answer>")
            total += reward
        assert terminated and info["success"] and info["metrics"]["boxes_on_target"] == 2.0
        on_target_at_start = len(env.room.boxes & env.room.targets)
        expected = -0.1 * len(solution) + (2 - on_target_at_start) * 1.0 + 10.0
        assert total == pytest.approx(expected), seed


def test_wall_bump_costs_a_step_and_is_not_effective():
    env = SokobanEnv()
    env.reset(options={"room": room_from_text(["######", "#P_X_#", "#__O_#", "#____#", "#____#", "######"])})
    obs, reward, terminated, truncated, info = env.step("<answer>Up</answer>")
    assert reward == pytest.approx(-0.1) and not (terminated or truncated)
    assert info["action_is_valid"] and not info["action_is_effective"] and obs.splitlines()[1] == "#P_X_#"
    _, reward, *_ = env.step("<answer>dance</answer>")
    assert reward == pytest.approx(-1.1)  # a no-op costing format_penalty: as much as the worst move


def test_box_on_and_off_target_and_solved_bonus():
    env = SokobanEnv()
    env.reset(options={"room": room_from_text(["######", "#PXO_#", "#____#", "#____#", "#____#", "######"])})
    obs, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert obs.splitlines()[1] == "#_P√_#"
    assert reward == pytest.approx(-0.1 + 1 + 10) and terminated and info["success"]
    env.reset(options={"room": room_from_text(["######", "#P√_O#", "#X___#", "#____#", "#____#", "######"])})
    _, reward, terminated, _, _ = env.step("<answer>Right</answer>")  # box off a target
    assert reward == pytest.approx(-0.1 - 1) and not terminated
    _, reward, terminated, _, _ = env.step("<answer>Right</answer>")  # onto the other target, one box left
    assert reward == pytest.approx(-0.1 + 1) and not terminated


def test_cannot_push_two_boxes_or_into_walls():
    env = SokobanEnv()
    env.reset(options={"room": room_from_text(["######", "#PXX_#", "#O_O_#", "#____#", "#____#", "######"])})
    before = env.text_observation()
    _, reward, _, _, info = env.step("<answer>Right</answer>")
    assert (
        env.text_observation() == before and not info["action_is_effective"] and reward == pytest.approx(-0.1)
    )
    env.reset(options={"room": room_from_text(["######", "#__PX#", "#O_O_#", "#____#", "#_X__#", "######"])})
    env.step("<answer>Right</answer>")
    assert env.player == room_from_text(["######", "#__PX#", "#O_O_#", "#____#", "#_X__#", "######"]).player


def test_text_symbols_and_player_on_target():
    env = SokobanEnv()
    env.reset(options={"room": room_from_text(["######", "#OP__#", "#_X_O#", "#____#", "#____#", "######"])})
    obs, *_ = env.step("<answer>Left</answer>")
    assert obs.splitlines()[1] == "#S___#"
    assert set(env.reset(seed=3)[0]) <= set("#_O√XPS\n")


def test_different_grid_vocab_is_the_same_game():
    plain, other = roll_envs.make("simple_sokoban"), roll_envs.make("sokoban_different_grid_vocab")
    for seed in range(20):
        a, b = plain.reset(seed=seed)[0], other.reset(seed=seed)[0]
        table = str.maketrans(
            dict(
                zip(
                    "#_O√XPS",
                    [
                        ALTERNATIVE_GRID[r]
                        for r in (
                            "wall",
                            "empty",
                            "target",
                            "box_on_target",
                            "box",
                            "player",
                            "player_on_target",
                        )
                    ],
                    strict=True,
                )
            )
        )
        assert a.translate(table) == b
    assert "W is a wall" in other.instruction


def test_larger_variant_and_bad_config():
    env = roll_envs.make("larger_sokoban")
    obs, _ = env.reset(seed=0)
    assert len(obs.splitlines()) == 8 and env.config.num_boxes == 2
    with pytest.raises(roll_envs.EnvConfigError, match="grid_vocab"):
        roll_envs.make("sokoban", grid_vocab={"wall": "#"})
    with pytest.raises(roll_envs.EnvConfigError, match="num_boxes"):
        roll_envs.make("sokoban", num_boxes=0)


def test_generation_is_deterministic_per_seed():
    assert generate_room(random.Random(5)) == generate_room(random.Random(5))
    env = SokobanEnv()
    assert env.reset(seed=11)[0] == env.reset(seed=11)[0]
