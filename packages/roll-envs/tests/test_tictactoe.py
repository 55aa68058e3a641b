"""TicTacToe, roll's two-player built-in, and the multi-player contract `check_env` enforces."""

from __future__ import annotations

import itertools

import pytest
import roll_envs
from roll_envs import check_env
from roll_envs.checker_players import check_players
from roll_envs.envs.tictactoe import TicTacToeEnv, best_moves, minimax_value, winner
from roll_envs.random_state import IsolatedEnv


def answer(cell: int | str) -> str:
    return f"<answer>{cell}</answer>"


def play(env: TicTacToeEnv, cells: list[int]) -> list[tuple]:
    return [env.step(answer(c)) for c in cells]


def test_x_wins_a_row_and_the_loser_gets_minus_one_on_that_move():
    env = roll_envs.make("tictactoe")
    _, info = env.reset(seed=0)
    assert info["next_player"] == "X" and info["player"] == ""
    *_, (obs, reward, terminated, _, info) = play(env, [1, 4, 2, 5, 3])
    assert terminated and reward == 1.0
    assert info["player"] == "X" and info["next_player"] == ""
    assert info["rewards"] == {"X": 1.0, "O": -1.0}
    assert info["player_success"] == {"X": True, "O": False}
    assert obs.endswith("X won.")


def test_turns_alternate_and_the_observation_is_the_next_players_view():
    env = roll_envs.make("tictactoe")
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(answer(5))
    assert (info["player"], info["next_player"], reward) == ("X", "O", 0.0)
    assert obs.splitlines() == ["1|2|3", "4|X|6", "7|8|9", "You play O. Your move."]


def test_a_taken_cell_is_refused_and_the_same_player_moves_again():
    env = roll_envs.make("tictactoe")
    env.reset(seed=0)
    env.step(answer(5))
    _, reward, terminated, _, info = env.step(answer(5))
    assert info["action_is_valid"] and info["action_is_refused"] and not terminated
    assert reward == pytest.approx(-0.1) and info["rewards"] == {"X": 0.0, "O": pytest.approx(-0.1)}
    assert (info["player"], info["next_player"]) == ("O", "O")
    _, reward, _, _, info = env.step("no cell")
    assert not info["action_is_valid"] and reward == pytest.approx(-0.1) and info["next_player"] == "O"


def test_a_full_board_without_a_line_is_a_draw():
    env = roll_envs.make("tictactoe")
    env.reset(seed=0)
    *_, (obs, reward, terminated, _, info) = play(env, [1, 2, 3, 5, 4, 6, 8, 7, 9])
    assert terminated and reward == 0.0 and info["rewards"] == {"X": 0.0, "O": 0.0}
    assert info["player_success"] == {"X": False, "O": False} and obs.endswith("Draw.")


def _slow_winner(board: tuple[str, ...]) -> str | None:
    """Rows, columns and diagonals written out by coordinates."""
    grid = [board[0:3], board[3:6], board[6:9]]
    lines = [list(r) for r in grid] + [[grid[r][c] for r in range(3)] for c in range(3)]
    lines += [[grid[i][i] for i in range(3)], [grid[i][2 - i] for i in range(3)]]
    for line in lines:
        if line[0] and line.count(line[0]) == 3:
            return line[0]
    return None


def test_winner_matches_a_coordinate_check_on_every_board():
    checked = 0
    for board in itertools.product(("", "X", "O"), repeat=9):
        lines_of = {m for m in "XO" if _slow_winner(tuple(c if c == m else "" for c in board))}
        if len(lines_of) == 2:  # lines of both marks: no game reaches it
            continue
        assert winner(board) == _slow_winner(board)
        checked += 1
    assert checked > 19_000


def test_minimax_knows_the_classic_facts():
    empty = ("",) * 9
    assert minimax_value(empty, "X") == 0  # perfect play draws
    # X to move with two in a row takes the third cell
    board = ("X", "X", "", "O", "O", "", "", "", "")
    assert best_moves(board, "X") == [2]
    # O to move must block X's row (or lose)
    assert best_moves(("X", "X", "", "", "O", "", "", "", ""), "O") == [2]


@pytest.mark.parametrize("seat", ["X", "O"])
def test_minimax_never_loses_to_random(seat):
    env = roll_envs.make("tictactoe")
    for seed in range(40):
        env.reset(seed=seed)
        terminated = False
        info: dict = {}
        while not terminated:
            policy = "minimax" if env.current_player == seat else "random"
            _, _, terminated, _, info = env.step(env.fixed_policy_answer(policy))
        assert info["rewards"][seat] >= 0.0


def test_one_seed_plays_one_game_against_the_random_policy():
    def game(seed: int) -> list[str]:
        env = IsolatedEnv.make(roll_envs.make, "tictactoe", opening_moves=2)
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        for _ in range(9):
            obs, _, terminated, _, _ = env.step(env.fixed_policy_answer("random"))
            seen.append(obs)
            if terminated:
                break
        return seen

    assert game(3) == game(3)
    assert len({tuple(game(s)) for s in range(6)}) > 1


def test_opening_moves_leave_a_board_in_play():
    for seed in range(20):
        env = TicTacToeEnv(opening_moves=4)
        env.reset(seed=seed)
        assert sum(1 for c in env.board if c) == 4 and env.current_player == "X"


def test_an_unknown_fixed_policy_is_named_with_the_choices():
    env = roll_envs.make("tictactoe")
    env.reset(seed=0)
    with pytest.raises(
        roll_envs.EnvConfigError, match=r"no fixed policy 'champion'.*\['random', 'minimax'\]"
    ):
        env.fixed_policy_answer("champion")


def test_check_env_passes_tictactoe():
    assert check_env(roll_envs.make("tictactoe", opening_moves=3)) == []


class IllegalPolicy(TicTacToeEnv):
    """A fixed policy that answers a taken cell."""

    def fixed_policy_answer(self, name: str) -> str:
        taken = [i for i, mark in enumerate(self.board) if mark]
        return self.format_answer(str((taken[0] if taken else 0) + 1))


class WrongMover(TicTacToeEnv):
    """Reports the wrong player as the mover."""

    def _players_info(self, mover, rewards):
        return {**super()._players_info(mover, rewards), "player": "O"}


def test_check_players_names_a_fixed_policy_that_plays_an_illegal_move():
    problems = check_players(IsolatedEnv(IllegalPolicy()), seed=0)
    assert problems and "does not play" in problems[0] and "action_is_refused True" in problems[0]


def test_check_players_names_a_wrong_mover():
    problems = check_players(IsolatedEnv(WrongMover()), seed=0)
    assert problems and "info['player'] is 'O', expected the player to move, 'X'" in problems[0]


def test_single_agent_envs_have_nothing_to_check_and_no_player_keys():
    env = roll_envs.make("frozen_lake")
    _, info = env.reset(seed=0)
    assert "player" not in info and check_players(IsolatedEnv(env), seed=0) == []
