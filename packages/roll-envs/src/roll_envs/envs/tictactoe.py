"""TicTacToe: roll's two-player built-in, played by two seats (X moves first, then O).

Cells are numbered 1-9, row by row; a free cell shows its number, a taken one its mark. Each `step` is
the move of `current_player`: its answer is a cell number. A taken cell is a refused move
(`refused_move_penalty`) and an unreadable answer an invalid one (`format_penalty`); either way the same
player moves again. Three marks in a row, column or diagonal win: the winner gets 1 and the loser -1 on
that move (`ActionOutcome.rewards`); a full board is a draw (0 each). The observation is the board as the
player to move sees it ("You play O."), so each seat's prompt is its own view.

Fixed policies for a seat (`fixed_policy_answer`): `random` (a uniformly random free cell) and `minimax`
(perfect play, a random one among the best moves); both draw from the episode's generator, so one seed
plays one game against them. `opening_moves` plays that many random moves at reset (from the seed), so
the groups of a batch start from different boards.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from pydantic import Field

from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig, turns_field

PLAYERS = ("X", "O")
CELLS = tuple(str(i) for i in range(1, 10))
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
FIXED_POLICIES = ("random", "minimax")


class TicTacToeConfig(EnvConfig):
    """Config of `TicTacToeEnv` (plus `format_penalty`, `answer_format`)."""

    max_steps: int = turns_field(20, "moves of both players, retries included, before truncation")
    format_penalty: float = Field(
        0.1, ge=0.0, description="subtracted from the reward of a move that names no cell (as a refused move)"
    )
    refused_move_penalty: float = Field(
        0.1, ge=0.0, description="subtracted from the reward of a move onto a taken cell"
    )
    opening_moves: int = Field(
        0, ge=0, le=4, description="random moves played at reset (drawn from the seed) before the first turn"
    )


def winner(board: tuple[str, ...]) -> str | None:
    """The player with three marks in a line on `board` (9 cells: 'X', 'O' or ''), else None."""
    return next((board[a] for a, b, c in LINES if board[a] and board[a] == board[b] == board[c]), None)


@functools.cache
def minimax_value(board: tuple[str, ...], to_move: str) -> int:
    """The game's value for `to_move` under perfect play by both: 1 win, 0 draw, -1 loss."""
    won = winner(board)
    if won is not None:
        return 1 if won == to_move else -1
    free = [i for i, mark in enumerate(board) if not mark]
    if not free:
        return 0
    other = PLAYERS[1 - PLAYERS.index(to_move)]
    return max(-minimax_value(_play(board, i, to_move), other) for i in free)


def best_moves(board: tuple[str, ...], to_move: str) -> list[int]:
    """The free cells (0-8) of the best value for `to_move` under perfect play."""
    other = PLAYERS[1 - PLAYERS.index(to_move)]
    values = {i: -minimax_value(_play(board, i, to_move), other) for i, mark in enumerate(board) if not mark}
    top = max(values.values())
    return [i for i, v in values.items() if v == top]


def _play(board: tuple[str, ...], cell: int, mark: str) -> tuple[str, ...]:
    return (*board[:cell], mark, *board[cell + 1 :])


class TicTacToeEnv(BaseEnv):
    """TicTacToe for two seats, X and O; see the module docstring.

    >>> env = TicTacToeEnv()
    >>> obs, info = env.reset(seed=0)
    >>> info["next_player"]
    'X'
    >>> _, reward, done, _, info = env.step("<answer>5</answer>")
    >>> info["player"], info["next_player"], reward, done
    ('X', 'O', 0.0, False)
    """

    config_cls = TicTacToeConfig
    owns_random_state = True  # draws only from the episode rng (np_random and generators seeded from it)
    never_blocks = True  # in-memory game logic: a step is microseconds, never waits
    config: TicTacToeConfig
    board: tuple[str, ...] = ("",) * 9  # the state before the first reset; each reset sets it on the instance
    to_move: str = PLAYERS[0]

    @property
    def instruction(self) -> str:
        """The rules and the answer format."""
        return (
            "TicTacToe on a 3x3 board. Two players, X and O, take turns writing their mark in a free cell; "
            "X moves first. Three of your marks in a row, column or diagonal win: the winner scores 1 and "
            "the loser -1; a full board without a line is a draw. Cells are numbered 1 to 9, row by row; a "
            "free cell shows its number. Answer with the number of a free cell, like "
            f"{self.format_answer('5')}. A move onto a taken cell is refused and you move again."
        )

    @property
    def valid_actions(self) -> list[str]:
        """Every cell number: a taken cell is read, then refused."""
        return list(CELLS)

    @property
    def players(self) -> tuple[str, ...]:
        """X and O."""
        return PLAYERS

    @property
    def current_player(self) -> str:
        """The player to move; "" once the game is won or drawn."""
        return "" if self._over() else self.to_move

    @property
    def fixed_policies(self) -> tuple[str, ...]:
        """`random` and `minimax`."""
        return FIXED_POLICIES

    def fixed_policy_answer(self, name: str) -> str:
        """The answer of `random` or `minimax` for the player to move (from the episode's generator)."""
        if name not in FIXED_POLICIES:
            return super().fixed_policy_answer(name)
        if name == "random":
            choices = [i for i, mark in enumerate(self.board) if not mark]
        else:
            choices = best_moves(self.board, self.to_move)
        return self.format_answer(CELLS[choices[int(self.np_random.integers(len(choices)))]])

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """An empty board, then `opening_moves` random moves."""
        self.board, self.to_move = ("",) * 9, PLAYERS[0]
        for _ in range(self.config.opening_moves):
            free = [i for i, mark in enumerate(self.board) if not mark]
            self._place(free[int(rng.integers(len(free)))])

    def apply_action(self, action: str) -> ActionOutcome:
        """Mark the cell, or refuse a taken one; a win or a full board ends the game."""
        cell = CELLS.index(action)
        if self.board[cell]:
            return ActionOutcome.refuse(reward=-self.config.refused_move_penalty)
        mover = self.to_move
        self._place(cell)
        won = winner(self.board)
        if won is not None:
            other = PLAYERS[1 - PLAYERS.index(mover)]
            return ActionOutcome(terminated=True, rewards={mover: 1.0, other: -1.0})
        return ActionOutcome(terminated=all(self.board))

    def text_observation(self) -> str:
        """The board; who is to move, or how the game ended."""
        rows = [
            "|".join(mark or CELLS[3 * r + c] for c, mark in enumerate(self.board[3 * r : 3 * r + 3]))
            for r in range(3)
        ]
        won = winner(self.board)
        if won is not None:
            status = f"{won} won."
        elif all(self.board):
            status = "Draw."
        else:
            status = f"You play {self.to_move}. Your move."
        return "\n".join([*rows, status])

    def state_key(self, observation: str) -> str:
        """The board and the player to move (the observation says no more)."""
        return "".join(mark or "." for mark in self.board) + self.to_move

    def is_success(self) -> bool:
        """Someone won (see `player_success` for whom)."""
        return winner(self.board) is not None

    def player_success(self, player: str) -> bool:
        """`player` won."""
        return winner(self.board) == player

    def _place(self, cell: int) -> None:
        self.board = _play(self.board, cell, self.to_move)
        self.to_move = PLAYERS[1 - PLAYERS.index(self.to_move)]

    def _over(self) -> bool:
        return winner(self.board) is not None or all(self.board)
