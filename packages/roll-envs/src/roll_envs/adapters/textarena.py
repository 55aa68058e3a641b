"""TextArena envs (`textarena`) played through roll: `make("textarena:TicTacToe-v0")`.

The policy is player 0. TextArena's own observation passes through (its LLM observation: the game's
instructions, then every message so far, history included) and the answer is handed to TextArena as
written (`answer_format="raw"`: the whole text after `</think>`), so TextArena reads its own `[4]`-style
moves. A move TextArena rejects (an occupied cell) is a refused move; TextArena ends the game on the
next one (its error allowance). `state_key` is TextArena's game state (the board), not the observation,
so that equal boards match although the histories differ.

Other players stay inside the env: each plays a random move from the list of moves its observation
offers (`Available Moves: '[0]', '[1]', ...`), drawn from the episode's generator. A game whose
observation lists no moves needs one player (`GuessTheNumber-v0`). This adapter does not expose TextArena's
players as roll seats yet (self-play or a named fixed player: docs/envs/players.md, shown on roll's `tictactoe`).
Some TextArena envs download word lists (nltk) at run time (Wordle, Hangman, ...); TicTacToe and
GuessTheNumber do not.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
from pydantic import Field

from roll_envs.adapters import import_library
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig, turns_field
from roll_envs.errors import EnvConfigError
from roll_envs.parsing import AnswerFormat

_LISTED_MOVE = re.compile(r"'(\[[^\]\n']{1,40}\])'")
_MOVE_LIST = re.compile(r"(?:Available|Valid) [Mm]oves:([^\n]*)")


class TextArenaConfig(EnvConfig):
    """Config of `TextArenaEnv`: TextArena's id and keyword arguments (plus the `EnvConfig` fields)."""

    env_id: str = Field(..., description="TextArena id, e.g. 'TicTacToe-v0'")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of textarena.make"
    )
    num_players: int = Field(0, ge=0, le=16, description="players; 0: 1 when the game allows it, else 2")
    max_steps: int = turns_field(50)
    answer_format: AnswerFormat = Field(AnswerFormat.RAW, description="how answers are read (TextArena: raw)")


class TextArenaEnv(BaseEnv):
    """A TextArena game seen by player 0; reward and success are player 0's at the end of the game."""

    config_cls = TextArenaConfig
    config: TextArenaConfig

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self._ta = import_library("textarena", "textarena")
        self.inner = self._make()
        self._obs = ""
        self._rng = np.random.default_rng(0)
        self._players = self.config.num_players
        self._reward = 0.0
        self._done = False

    def _make(self) -> Any:
        try:
            return self._ta.make(self.config.env_id, **self.config.env_kwargs)
        except Exception as exc:  # TextArena raises ValueError or its own errors for unknown ids
            raise EnvConfigError(
                f"textarena: textarena.make({self.config.env_id!r}) failed: {exc}. "
                "Fix: use an id from textarena.envs.registration, e.g. 'TicTacToe-v0'."
            ) from exc

    @property
    def instruction(self) -> str:
        """A fixed line; TextArena's own rules and move format come in the observation."""
        return (
            f"You are Player 0 in the TextArena game {self.config.env_id}. The rules and the move format "
            "come in the first message; answer with your move in that format, e.g. [4]."
        )

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """A fresh TextArena env (its LLM observation wrapper keeps the history across resets), reset with a
        seed from `rng`; other players move until it is player 0's turn."""
        self.inner = self._make()
        self._rng = rng
        seed = int(rng.integers(2**31))
        counts = [self._players] if self._players else [1, 2]
        for i, n in enumerate(counts):
            try:
                self.inner.reset(num_players=n, seed=seed)
                self._players = n
                break
            except Exception:  # a game refuses a player count it does not support
                if i == len(counts) - 1:
                    raise
        self._reward, self._done = 0.0, False
        self._play_others()

    def apply_action(self, action: str) -> ActionOutcome:
        """Player 0's move, then the other players' until it is player 0's turn again."""
        state = self._state()
        self._done, _ = self.inner.step(action=action)
        refused = bool(state.game_info.get(0, {}).get("invalid_move")) or (
            not self._done and state.current_player_id == 0 and getattr(state, "error_count", 0) > 0
        )
        if not self._done and not refused:
            self._play_others()
        self._update()
        reward = self._reward if self._done else 0.0
        return ActionOutcome.refuse(reward, self._done) if refused else ActionOutcome(reward, self._done)

    def text_observation(self) -> str:
        """TextArena's observation of player 0 (history included)."""
        return self._obs

    def state_key(self, observation: str) -> str:
        """TextArena's game state (board, ...) as JSON: equal boards match whatever the history."""
        return json.dumps(self._state().game_state, sort_keys=True, default=str)[:4000]

    def is_success(self) -> bool:
        """The game ended with a positive reward for player 0."""
        return self._done and self._reward > 0

    def close(self) -> None:
        """Nothing to release (TextArena's `close` only reports rewards)."""

    def _state(self) -> Any:
        env = self.inner
        while not hasattr(env, "state") and hasattr(env, "env"):
            env = env.env
        return env.state

    def _play_others(self) -> None:
        """Random listed moves for every other player until player 0 is to move or the game ends."""
        for _ in range(1000):
            if self._done:
                break
            player, obs = self.inner.get_observation()
            if player == 0:
                self._obs = str(obs)
                return
            moves = _listed_moves(str(obs))
            if not moves:
                raise EnvConfigError(
                    f"textarena: {self.config.env_id} asks player {player} to move, and its observation lists "
                    "no moves for the built-in random opponent. Fix: pick a one-player game or num_players=1."
                )
            self._done, _ = self.inner.step(action=moves[int(self._rng.integers(len(moves)))])
        self._update()

    def _update(self) -> None:
        if self._done:
            rewards = self._state().rewards or {}
            self._reward = float(rewards.get(0, 0.0))
            self._obs = f"{self._obs}\n[GAME] The game is over. {self._state().game_info.get(0, {}).get('reason', '')}".rstrip()
        elif not self._obs or self._state().current_player_id == 0:
            player, obs = self.inner.get_observation()
            if player == 0 and obs:
                self._obs = str(obs)


def _listed_moves(observation: str) -> list[str]:
    """The moves of the last 'Available Moves: ...' line of `observation`."""
    lines = _MOVE_LIST.findall(observation)
    return _LISTED_MOVE.findall(lines[-1]) if lines else []
