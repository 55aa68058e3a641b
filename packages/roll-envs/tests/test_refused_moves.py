"""Refused moves (`ActionOutcome.refuse`) and the default matcher reading the current state's `valid_actions`.

Expected outcomes come from a slow reference loop over the same rules, written without `BaseEnv`."""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pytest
import roll_envs
from roll_envs import ActionOutcome, BaseEnv, EnvConfig, GarbagePaysWarning, check_env
from roll_envs.checker import check_info

CELLS = [str(n) for n in range(1, 10)]
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
REFUSED_REWARD = -0.5


class TicTacToeSolo(BaseEnv):
    """Put X's on a 3x3 board until three are in a row; naming an occupied cell is refused (-0.5, no change)."""

    config_cls = EnvConfig

    @property
    def instruction(self) -> str:
        return f"Name a free cell 1-9, like {self.format_answer('5')}."

    @property
    def valid_actions(self) -> list[str]:
        return list(CELLS)  # the game's moves; whether one is allowed depends on the board

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.board = [" "] * 9
        self.board[int(rng.integers(9))] = "O"

    def apply_action(self, action: str) -> ActionOutcome:
        cell = int(action) - 1
        if self.board[cell] != " ":
            return ActionOutcome.refuse(REFUSED_REWARD)
        self.board[cell] = "X"
        return ActionOutcome(1.0 if self.is_success() else 0.0, self.is_success(), True)

    def text_observation(self) -> str:
        return "".join(self.board)

    def is_success(self) -> bool:
        return any(all(self.board[i] == "X" for i in line) for line in LINES)


def reference_turn(board: list[str], moves: list[str], valid: bool, penalty: float) -> dict[str, Any]:
    """The rules of a turn played by hand: moves in order, stopping at a refused move or a win."""
    reward, refused, executed, won = 0.0, False, [], False
    for move in moves:
        cell = int(move) - 1
        if board[cell] != " ":
            reward += REFUSED_REWARD
            refused = True
            break
        board[cell] = "X"
        executed.append(move)
        won = any(all(board[i] == "X" for i in line) for line in LINES)
        if won:
            reward += 1.0
            break
    if not valid:
        reward -= penalty
    return {"reward": reward, "refused": refused, "executed": executed, "won": won, "board": "".join(board)}


@pytest.mark.parametrize("cap", [1, 3])
def test_refused_moves_match_a_reference_loop(cap):
    env = TicTacToeSolo(max_actions_per_turn=cap, max_steps=40, format_penalty=0.25)
    rng = random.Random(cap)
    turns = refusals = 0
    for seed in range(30):
        obs, info = env.reset(seed=seed)
        assert info["action_is_refused"] is False
        board = list(obs)
        for _ in range(40):
            moves = [rng.choice(CELLS) for _ in range(rng.randint(1, cap))]
            garbage = rng.random() < 0.1
            text = f"<answer>{' || '.join([*moves, 'jump'] if garbage else moves)}</answer>"
            if cap == 1:  # one action per turn: `||` is part of the answer, so "5 || jump" is no cell
                valid, played = not garbage, [] if garbage else moves
            else:  # 'jump' after the moves is read only inside the cap
                valid, played = not (garbage and len(moves) < cap), moves
            expected = reference_turn(board, played, valid, 0.25)
            obs, reward, terminated, truncated, info = env.step(text)
            assert reward == pytest.approx(expected["reward"])
            assert info["action_is_valid"] is valid
            assert info["action_is_refused"] is expected["refused"]
            assert info["executed_actions"] == expected["executed"]
            assert info["action_is_effective"] is bool(expected["executed"])
            assert info["metrics"]["action_is_refused"] == float(expected["refused"])
            assert info["metrics"]["num_actions"] == len(expected["executed"])
            assert obs == expected["board"] and terminated is expected["won"]
            turns, refusals = turns + 1, refusals + expected["refused"]
            if terminated or truncated:
                break
    assert refusals > 10 and turns > refusals  # both kinds of turn were played


def test_a_refused_move_is_read_so_no_format_penalty_and_the_state_is_kept():
    env = TicTacToeSolo(format_penalty=1.0)
    obs, _ = env.reset(seed=0)
    taken = str(obs.index("O") + 1)
    new_obs, reward, terminated, _, info = env.step(f"<answer>{taken}</answer>")
    assert (new_obs, reward, terminated) == (obs, REFUSED_REWARD, False)
    assert info["action_is_valid"] and info["action_is_refused"] and not info["action_is_effective"]
    assert info["executed_actions"] == [] and env.elapsed_steps == 1


def test_builtin_envs_refuse_nothing():
    """FrozenLake and Sokoban moves into a wall or an edge are legal no-ops (ineffective), not refused."""
    for env_id, wall_move in (("frozen_lake", "Left"), ("sokoban", "Up")):
        env = roll_envs.make(env_id)
        env.reset(seed=0)
        for _ in range(6):
            _, _, terminated, truncated, info = env.step(f"<answer>{wall_move}</answer>")
            assert info["action_is_refused"] is False
            if terminated or truncated:
                break


def test_check_env_accepts_refusals_and_checks_the_flag_type():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_env(TicTacToeSolo(format_penalty=-REFUSED_REWARD)) == []
    # a refused move is an answer the env read: garbage must not score more than it either
    with pytest.warns(GarbagePaysWarning, match="set format_penalty to at least 0.5"):
        check_env(TicTacToeSolo())
    info = {"action_is_valid": True, "action_is_effective": True, "success": False, "metrics": {}}
    assert check_info({**info, "action_is_refused": 1}, "step()") == [
        "step(): info['action_is_refused'] should be bool; got int (1). Fix: convert it, e.g. bool(...), "
        "or leave the key out."
    ]
    assert check_info(info, "step()") == []  # the key is optional for envs that are not BaseEnvs


# ---- valid actions that change from state to state ------------------------------------------------------------------


class FreeCells(TicTacToeSolo):
    """The same game listing only the free cells: an occupied cell is then not an action at all."""

    @property
    def valid_actions(self) -> list[str]:
        return [c for c, mark in zip(CELLS, self.board, strict=True) if mark == " "]


class Unlocking(BaseEnv):
    """Rooms 0, 1, 2: room n offers the doors `door0`..`doorn`; `door{n}` leads on, any other door stays."""

    config_cls = EnvConfig

    @property
    def instruction(self) -> str:
        return "Open doors."

    @property
    def valid_actions(self) -> list[str]:
        return [f"door{i}" for i in range(self.room + 1)]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.room = 0

    def apply_action(self, action: str) -> ActionOutcome:
        if action != f"door{self.room}":
            return ActionOutcome(0.0, False, False)
        self.room += 1
        return ActionOutcome(float(self.room == 3), self.room == 3, True)

    def text_observation(self) -> str:
        return f"room {self.room}"

    def is_success(self) -> bool:
        return self.room == 3


def test_the_default_matcher_reads_the_current_states_valid_actions():
    env = FreeCells()
    obs, _ = env.reset(seed=0)
    free = next(str(i + 1) for i, mark in enumerate(obs) if mark == " ")
    assert env.step(f"<answer>{free}</answer>")[4]["action_is_valid"]
    # the cell is taken now: no longer in valid_actions, so not an action (the first list had it)
    _, _, _, _, info = env.step(f"<answer>{free}</answer>")
    assert not info["action_is_valid"] and not info["action_is_refused"] and info["executed_actions"] == []

    grow = Unlocking()
    grow.reset(seed=0)
    assert grow.step("<answer>door1</answer>")[4]["action_is_valid"] is False  # not offered in room 0
    for room in range(3):
        _, reward, terminated, _, info = grow.step(f"<answer>DOOR{room}</answer>")  # offered only from room n
        assert info["action_is_valid"] and info["executed_actions"] == [f"door{room}"]
    assert (reward, terminated) == (1.0, True)


def test_envs_with_changing_valid_actions_pass_check_env():
    assert check_env(FreeCells()) == [] and check_env(Unlocking()) == []
