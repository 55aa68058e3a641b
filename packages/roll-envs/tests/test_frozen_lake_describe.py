"""FrozenLake's `describe` option: the board followed by one line in words, a function of the board."""

from __future__ import annotations

import numpy as np
import pytest
import roll_envs
from roll_envs.envs.frozen_lake import (
    ACTIONS,
    FrozenLakeEnv,
    frozen_lake_description,
    frozen_lake_neighbours,
    move,
)
from roll_envs.envs.frozen_lake.baselines import description_rule


def answer(move_name: str) -> str:
    return f"<answer>{move_name}</answer>"


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        (  # a corner: two edges, ice on the other sides
            ["SFF", "FHF", "FFG"],
            "You are at row 1, column 1. The goal is at row 3, column 3: Down 2, Right 2. "
            "Left: edge, Down: ice, Right: ice, Up: edge.",
        ),
        (  # the goal on the left, a hole above
            ["FHF", "GSF", "FFF"],
            "You are at row 2, column 2. The goal is at row 2, column 1: Left 1. "
            "Left: goal, Down: ice, Right: ice, Up: hole.",
        ),
        (  # a hole on the left, the goal below
            ["FFFF", "FHSF", "FFGF", "FFFF"],
            "You are at row 2, column 3. The goal is at row 3, column 3: Down 1. "
            "Left: hole, Down: goal, Right: ice, Up: ice.",
        ),
        (  # one row, the right edge
            ["GFS"],
            "You are at row 1, column 3. The goal is at row 1, column 1: Left 2. "
            "Left: ice, Down: edge, Right: edge, Up: edge.",
        ),
        (  # no goal on a given map: the goal's sentence is left out
            ["SF", "HF"],
            "You are at row 1, column 1. Left: edge, Down: hole, Right: ice, Up: edge.",
        ),
    ],
)
def test_the_line_on_hand_made_maps(rows, line):
    env = FrozenLakeEnv(describe=True)
    obs, info = env.reset(options={"map": rows})
    board, said = obs.rsplit("\n", 1)
    assert said == line and board == FrozenLakeEnv().reset(options={"map": rows})[0]
    assert info["state_key"] == obs


def test_the_line_once_the_episode_has_ended():
    env = FrozenLakeEnv(describe=True)
    env.reset(options={"map": ["SH", "FG"]})
    obs, *_ = env.step(answer("Right"))
    assert obs == "_X\n_G\nYou fell into a hole at row 1, column 2. The goal is at row 2, column 2."
    env.reset(options={"map": ["SH", "FG"]})
    env.step(answer("Down"))
    obs, reward, terminated, *_ = env.step(answer("Right"))
    assert (reward, terminated) == (1.0, True)
    assert obs == "_O\n_√\nYou reached the goal at row 2, column 2."


def test_the_default_observation_is_the_board_alone():
    plain, described = FrozenLakeEnv(), FrozenLakeEnv(describe=True)
    rng = np.random.default_rng(0)
    for seed in range(100):
        obs, _ = plain.reset(seed=seed)
        told, _ = described.reset(seed=seed)
        for _ in range(5):
            rows = obs.split("\n")
            assert len(rows) == 4 and set(obs) <= set("P_OGX√\n")  # no words without describe
            assert told == f"{obs}\n{frozen_lake_description(obs)}"
            assert frozen_lake_neighbours(told) == frozen_lake_neighbours(obs)
            move_name = ACTIONS[int(rng.integers(4))]
            obs, _, terminated, truncated, _ = plain.step(answer(move_name))
            told = described.step(answer(move_name))[0]
            if terminated or truncated:
                break
    assert np.array_equal(plain.render("rgb_array"), described.render("rgb_array"))


def test_the_line_matches_the_env_state():
    env = FrozenLakeEnv(size=5, describe=True)
    words = {"F": "ice", "S": "ice", "H": "hole", "G": "goal"}
    for seed in range(100):
        obs, _ = env.reset(seed=seed)
        row, col = divmod(env.position, 5)
        goal_row, goal_col = divmod("".join(env.desc).index("G"), 5)
        said = []
        for index, name in enumerate(ACTIONS):
            there = move(env.desc, env.position, index)
            said.append(f"{name}: {'edge' if there == env.position else words[''.join(env.desc)[there]]}")
        # the offset walked cell by cell: the Down (or Up) moves first, then the Right (or Left) ones
        steps, (r, c) = [], (row, col)
        for name, (dr, dc) in (("Down", (1, 0)), ("Up", (-1, 0)), ("Right", (0, 1)), ("Left", (0, -1))):
            count = 0
            while (dr and (goal_row - r) * dr > 0) or (dc and (goal_col - c) * dc > 0):
                r, c, count = r + dr, c + dc, count + 1
            steps += [f"{name} {count}"] if count else []
        assert obs.split("\n")[-1] == (
            f"You are at row {row + 1}, column {col + 1}. The goal is at row {goal_row + 1}, column "
            f"{goal_col + 1}: {', '.join(steps)}. {', '.join(said)}."
        )


def test_the_instruction_mentions_the_line_only_with_describe():
    assert "Below the map" in FrozenLakeEnv(describe=True).instruction
    assert "Below the map" not in FrozenLakeEnv().instruction


def test_equal_states_have_equal_state_keys():
    env = FrozenLakeEnv(describe=True)
    env.reset(options={"map": ["SFF", "FFF", "FFG"]})
    via_right = [env.step(answer(m))[4]["state_key"] for m in ("Right", "Down")][-1]
    env.reset(options={"map": ["SFF", "FFF", "FFG"]})
    via_down = [env.step(answer(m))[4]["state_key"] for m in ("Down", "Right")][-1]
    assert via_right == via_down and "row 2, column 2" in via_right


@pytest.mark.parametrize("overrides", [{}, {"is_slippery": True}, {"answer_format": "tool_call", "size": 6}])
def test_check_env_passes_with_describe(overrides):
    assert roll_envs.check_env(FrozenLakeEnv(describe=True, **overrides), seeds=(0, 1, 2, 3)) == []


def test_offset_cells_names_each_goalward_cell_beside_its_direction():
    env = FrozenLakeEnv(describe=True, offset_cells=True)
    obs, _ = env.reset(options={"map": ["FFF", "FSH", "FFG"]})
    assert obs.rsplit("\n", 1)[1] == (
        "You are at row 2, column 2. The goal is at row 3, column 3: Down 1 (ice), Right 1 (hole). "
        "Left: ice, Down: ice, Right: hole, Up: ice."
    )
    obs, *_ = env.step(answer("Down"))
    assert ": Right 1 (goal). Left: ice, Down: edge, Right: goal, Up: ice." in obs


def test_offset_cells_keep_the_rule_its_moves():
    """The line keeps the list of moves, so the rule reads the same thing and the env's baselines are unchanged."""
    plain, bound = FrozenLakeEnv(describe=True), FrozenLakeEnv(describe=True, offset_cells=True)
    for seed in range(200):
        said, _ = plain.reset(seed=seed)
        told, _ = bound.reset(seed=seed)
        for _ in range(10):
            assert description_rule(told) == description_rule(said)
            move_name = description_rule(said)
            said, _, terminated, truncated, _ = plain.step(answer(move_name))
            told = bound.step(answer(move_name))[0]
            if terminated or truncated:
                break
    assert plain.baselines(turns=10, seeds=range(64)) == bound.baselines(turns=10, seeds=range(64))


def test_offset_cells_without_describe_is_refused():
    with pytest.raises(roll_envs.EnvConfigError, match="describe: true"):
        FrozenLakeEnv(offset_cells=True)


def test_the_rule_demonstrator_answers_the_rules_move_where_the_shortest_path_differs():
    # Down 1, Right 2 on open ice: breadth-first ties go Down (ACTIONS order), the rule along the larger offset
    rows = ["SFF", "FFG"]
    shortest, ruled = (
        FrozenLakeEnv(describe=True),
        FrozenLakeEnv(describe=True, demonstrator="description_rule"),
    )
    shortest.reset(options={"map": rows})
    ruled.reset(options={"map": rows})
    assert shortest.demonstration() == answer("Down")
    assert ruled.demonstration() == answer("Right")
    played = []
    while (demonstrated := ruled.demonstration()) is not None:
        played.append(demonstrated)
        ruled.step(demonstrated)
    assert played == [answer("Right"), answer("Down"), answer("Right")] and ruled.is_success()
    assert ruled.demonstration() is None  # the episode ended


def test_the_rule_demonstrator_without_describe_is_refused():
    with pytest.raises(roll_envs.EnvConfigError, match="describe: true"):
        FrozenLakeEnv(demonstrator="description_rule")
