"""Guess the secret number: the smallest complete roll env, written as the roll-envs tutorial describes."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field
from roll_envs import ActionOutcome, BaseEnv, EnvConfig


class GuessNumberConfig(EnvConfig):
    """The config: pydantic, so a wrong key or value is a clear error naming this env and the field."""

    max_number: int = Field(16, ge=2, le=100, description="the secret is between 1 and max_number")
    max_steps: int = Field(8, ge=1, le=100, description="guesses before the episode is truncated")


class GuessNumberEnv(BaseEnv):
    """Guess a number between 1 and `max_number`; each wrong guess is answered with 'higher' or 'lower'."""

    config_cls = GuessNumberConfig
    config: GuessNumberConfig

    @property
    def instruction(self) -> str:
        """The system prompt: the game, the actions and the answer format."""
        return (
            f"Guess the secret number between 1 and {self.config.max_number}. "
            "After each guess you are told higher or lower. Answer with one number, like <answer>8</answer>."
        )

    @property
    def valid_actions(self) -> list[str]:
        """The numbers 1 .. max_number."""
        return [str(n) for n in range(1, self.config.max_number + 1)]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Draw the secret from `rng` (all randomness from `rng` keeps seeds reproducible)."""
        self.secret = int(rng.integers(1, self.config.max_number + 1))
        self.hint = "Make your first guess."
        self.solved = False

    def apply_action(self, action: str) -> ActionOutcome:
        """Compare the guess with the secret: reward 1 and the end of the episode when it is right."""
        guess = int(action)
        self.solved = guess == self.secret
        self.hint = (
            "Correct!"
            if self.solved
            else f"{guess} is wrong: the secret is {'higher' if guess < self.secret else 'lower'}."
        )
        return ActionOutcome(reward=1.0 if self.solved else 0.0, terminated=self.solved, effective=True)

    def text_observation(self) -> str:
        """What the model reads each turn."""
        return self.hint

    def is_success(self) -> bool:
        """Guessed the secret."""
        return self.solved
