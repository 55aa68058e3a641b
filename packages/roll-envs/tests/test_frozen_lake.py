"""FrozenLake: map generation, text, rewards, limits, and identical dynamics to Gymnasium's FrozenLake-v1."""

from __future__ import annotations

import random

import gymnasium
import numpy as np
import pytest
import roll_envs
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from roll_envs.envs.frozen_lake import (
    ACTIONS,
    FrozenLakeEnv,
    frozen_lake_neighbours,
    generate_map,
    has_path,
    move,
)

INFO_KEYS = {"action_is_valid", "action_is_effective", "success", "metrics", "state_key"}


def answer(*moves: str) -> str:
    return f"<answer>{' || '.join(moves)}</answer>"


def test_generated_maps_are_valid_and_varied():
    maps = set()
    for seed in range(500):
        desc = generate_map(np.random.default_rng(seed), 4, 0.8)
        flat = "".join(desc)
        assert len(desc) == 4 and all(len(r) == 4 for r in desc)
        assert flat.count("S") == 1 and flat.count("G") == 1 and set(flat) <= set("SFHG")
        board = [list(r) for r in desc]
        assert has_path(board, flat.index("S"), flat.index("G"))
        maps.add(flat)
    assert len(maps) > 450
    starts = {"".join(generate_map(np.random.default_rng(s))).index("S") for s in range(200)}
    assert len(starts) == 16  # random start, as in RAGEN


def test_observation_symbols_and_seeding():
    env = FrozenLakeEnv()
    obs, info = env.reset(seed=3)
    assert obs == env.reset(seed=3)[0]
    rows = obs.split("\n")
    assert len(rows) == 4 and all(len(r) == 4 for r in rows)
    assert obs.count("P") == 1 and obs.count("G") == 1 and set(obs) <= set("P_OG\n")
    assert set(info) >= INFO_KEYS and info["success"] is False and info["state_key"] == obs
    assert len({env.reset(seed=s)[0] for s in range(50)}) > 40


def test_goal_hole_and_symbols():
    env = FrozenLakeEnv()
    env.reset(options={"map": ["SG", "HF"]})
    obs, reward, terminated, truncated, info = env.step(answer("Right"))
    assert (obs, reward, terminated, truncated) == ("_√\nO_", 1.0, True, False)
    assert info["success"] is True and info["metrics"]["success"] == 1.0
    env.reset(options={"map": ["SG", "HF"]})
    obs, reward, terminated, _, info = env.step(answer("Down"))
    assert (obs, reward, terminated, info["success"]) == ("_G\nX_", 0.0, True, False)


def test_hole_penalty_only_on_the_move_into_the_hole():
    env = FrozenLakeEnv(hole_penalty=1.0)
    env.reset(options={"map": ["SF", "HG"]})
    assert env.step(answer("Right"))[1] == 0.0  # ice: no penalty
    assert env.step(answer("Down"))[1:3] == (1.0, True)  # the goal is unchanged
    env.reset(options={"map": ["SF", "HG"]})
    _, reward, terminated, _, info = env.step(answer("Down"))
    assert (reward, terminated, info["success"]) == (-1.0, True, False)
    with pytest.raises(Exception, match="hole_penalty"):
        FrozenLakeEnv(hole_penalty=-1.0)


def test_invalid_action_is_a_noop_with_the_format_penalty():
    env = FrozenLakeEnv(format_penalty=0.1)
    obs0, _ = env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("I think I go left")
    assert obs == obs0 and reward == pytest.approx(-0.1) and not (terminated or truncated)
    assert info["action_is_valid"] is False and info["action_is_effective"] is False
    env = FrozenLakeEnv()
    env.reset(seed=1)
    assert env.step("garbage")[1] == 0.0


def test_wall_bump_is_valid_but_not_effective():
    env = FrozenLakeEnv()
    env.reset(options={"map": ["SF", "FG"]})
    _, _, _, _, info = env.step(answer("Up"))
    assert info["action_is_valid"] and not info["action_is_effective"]


def test_truncation_after_max_steps():
    env = FrozenLakeEnv(max_steps=3)
    env.reset(options={"map": ["SFF", "FFF", "FFG"]})
    flags = [env.step(answer("Up"))[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    _, reward, terminated, truncated, _ = env.step(answer("Down"))
    assert reward == 0.0 and truncated and not terminated


def test_several_moves_per_turn_stop_at_episode_end():
    env = FrozenLakeEnv(max_actions_per_turn=3)
    env.reset(options={"map": ["SGF", "FFF", "FFF"]})
    _, reward, terminated, _, info = env.step(answer("Right", "Right", "Down"))
    assert info["executed_actions"] == ["Right"] and reward == 1.0 and terminated
    assert "||" in env.instruction and "3" in env.instruction


def test_step_before_reset_raises_a_helpful_error():
    with pytest.raises(roll_envs.ResetNeeded, match="reset"):
        FrozenLakeEnv().step(answer("Left"))


def _gym_env(desc: list[str], slippery: bool, success_rate: float = 1 / 3) -> GymFrozenLake:
    return GymFrozenLake(desc=desc, is_slippery=slippery, success_rate=success_rate)


@pytest.mark.parametrize("slippery", [False, True])
def test_dynamics_identical_to_gymnasium(slippery):
    """Same map, same action sequences (and, on slippery ice, the same random stream) -> same trajectory."""
    rng = random.Random(0)
    ours = FrozenLakeEnv(is_slippery=slippery, max_steps=1000)
    for episode in range(300):
        size = rng.choice([3, 4, 5, 6])
        desc = generate_map(np.random.default_rng(episode), size, rng.choice([0.6, 0.8, 1.0]))
        ref = _gym_env(desc, slippery)
        s, _ = ref.reset(seed=episode)
        ours.reset(options={"map": desc})
        ours.np_random = np.random.Generator(np.random.PCG64())
        ours.np_random.bit_generator.state = ref.unwrapped.np_random.bit_generator.state
        assert ours.position == s
        for _ in range(30):
            a = rng.randrange(4)
            s, r, term, _, _ = ref.step(a)
            _, reward, terminated, _, info = ours.step(answer(ACTIONS[a]))
            assert (ours.position, reward, terminated) == (s, float(r), term), (desc, episode)
            assert info["success"] == (desc[s // size][s % size] == "G")
            if term:
                break


def test_slippery_success_rate_matches_gymnasium():
    desc = ["SFFF", "FFFF", "FFFF", "FFFG"]
    ref = _gym_env(desc, True, success_rate=0.75)
    ours = FrozenLakeEnv(is_slippery=True, success_rate=0.75, max_steps=1000)
    ref.reset(seed=5)
    ours.reset(options={"map": desc})
    ours.np_random.bit_generator.state = ref.unwrapped.np_random.bit_generator.state
    for a in [1, 2, 2, 1, 0, 3, 1, 1, 2, 2] * 3:
        s, *_ = ref.step(a)
        ours.step(answer(ACTIONS[a]))
        assert ours.position == s


def test_registered_with_gymnasium_and_vectorisable():
    env = gymnasium.make("roll_envs/FrozenLake-v0")
    obs, info = env.reset(seed=7)
    assert obs == FrozenLakeEnv().reset(seed=7)[0]
    obs, *_, info = env.step(answer("Left"))
    assert isinstance(obs, str) and "success" in info
    vec = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("roll_envs/FrozenLake-v0")] * 2)
    obs, _ = vec.reset(seed=[1, 2])
    assert len(obs) == 2
    vec.close()


def test_rgb_frame():
    env = FrozenLakeEnv(render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert env.render("text") == env.text_observation()


@pytest.mark.parametrize(
    ("board", "expected"),
    [
        ("___\n_P_\n___", "Left _ Down _ Right _ Up _"),  # the middle: four cells of ice
        ("P__\n___\n___", "Left edge Down _ Right _ Up edge"),  # a corner: two edges
        ("__O\n_GP\n___", "Left G Down _ Right edge Up O"),  # the goal on one side, a hole above
        ("_O_\nOPO\n_O_", "Left O Down O Right O Up O"),  # holes all round
        ("___\n___\n_P_", "Left _ Down edge Right _ Up _"),  # the bottom row
        ("_P", "Left _ Down edge Right edge Up edge"),  # one row
        ("_X\n_G", None),  # in a hole: no P on the board
        ("__√\n___", None),  # on the goal: no P either
    ],
)
def test_frozen_lake_neighbours_on_hand_written_boards(board, expected):
    assert frozen_lake_neighbours(board) == expected


def test_frozen_lake_neighbours_match_the_env_state():
    env = FrozenLakeEnv(size=5)
    for seed in range(100):
        obs, _ = env.reset(seed=seed)
        named = dict(zip(*[iter(frozen_lake_neighbours(obs).split())] * 2, strict=True))
        assert list(named) == list(ACTIONS)
        for action, symbol in named.items():
            there = move(env.desc, env.position, ACTIONS.index(action))
            cell = "".join(env.desc)[there]
            assert symbol == ("edge" if there == env.position else {"H": "O", "G": "G"}.get(cell, "_"))
    assert roll_envs.frozen_lake_neighbours is frozen_lake_neighbours
