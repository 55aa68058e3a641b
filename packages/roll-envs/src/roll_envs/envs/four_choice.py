"""FourChoice: a one-turn contextual bandit, the smallest task on which an agent must learn from reward.

Each episode a light shows one of four colours; each colour has one right answer among A, B, C and D,
always the same (`ANSWER_KEY`), which the instruction does not tell. A right answer scores 1, a wrong
one 0, and either ends the episode; an answer that is not one of the four letters is an invalid action.
A policy that ignores the colour is right a quarter of the time, one that has learnt the key always:
the pipeline's learning test (tests/test_learning.py) trains the builtin tiny model from one to the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.baseline_types import EnvBaselines, scored_seeds
from roll_envs.config import EnvConfig, turns_field
from roll_envs.errors import EnvConfigError

COLOURS = ("red", "green", "blue", "yellow")
"""What the light shows, in the order a seed draws them from."""

ANSWERS = ("A", "B", "C", "D")
"""The action vocabulary."""

ANSWER_KEY: dict[str, str] = {"red": "C", "green": "A", "blue": "D", "yellow": "B"}
"""The right answer for each colour: a permutation that is neither the colours' order nor its reverse."""


class FourChoiceConfig(EnvConfig):
    """Config of `FourChoiceEnv` (plus `format_penalty`, `max_actions_per_turn`): one turn by default."""

    max_steps: int = turns_field(
        1, "turns before the episode is truncated; above 1 an invalid answer may be retried"
    )
    colour: Literal["red", "green", "blue", "yellow"] | None = Field(
        None,
        description="show this colour every episode (null: the seed draws it). A training run can give each colour"
        " its own env tag with a fixed share of the groups, so every batch holds the colours in equal numbers",
    )


def right_answer(colour: str) -> str:
    """The answer that scores for `colour`."""
    return ANSWER_KEY[colour]


class FourChoiceEnv(BaseEnv):
    """FourChoice: name the hidden answer (A-D) of the colour the light shows; one turn, reward 1 or 0.

    `reset(options={"colour": "blue"})` shows a given colour instead of a seeded one; so does the config's
    `colour`, for every episode (the option wins where both are given).

    >>> env = FourChoiceEnv()
    >>> env.reset(seed=0)[0]
    'The light is yellow.'
    >>> env.step("<answer>B</answer>")[1:3]
    (1.0, True)
    """

    config_cls = FourChoiceConfig
    owns_random_state = True  # draws only from the episode rng (np_random and generators seeded from it)
    never_blocks = True  # in-memory game logic: a step is microseconds, never waits
    config: FourChoiceConfig
    colour: str = COLOURS[0]  # the state before the first reset; each reset sets it on the instance
    answer: str | None = None

    @property
    def instruction(self) -> str:
        """The system prompt (about 50 words); it does not give the key."""
        return (
            "A light shows one of four colours: red, green, blue or yellow. Each colour has one right "
            "answer among A, B, C and D, always the same one, which you have to find out. "
            f"Answer with one letter, like {self.format_answer('A')}."
        )

    @property
    def valid_actions(self) -> list[str]:
        """A, B, C, D."""
        return list(ANSWERS)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Take `options["colour"]`, else the config's `colour`, else draw the colour from `rng`."""
        if "colour" in options:
            if options["colour"] not in COLOURS:
                raise EnvConfigError(
                    f"four_choice: options['colour'] must be one of {list(COLOURS)}; got {options['colour']!r}."
                )
            self.colour = options["colour"]
        elif self.config.colour is not None:
            self.colour = self.config.colour
        else:
            self.colour = COLOURS[int(rng.integers(len(COLOURS)))]
        self.answer = None

    def apply_action(self, action: str) -> ActionOutcome:
        """Any answer ends the episode; the right one scores 1."""
        self.answer = action
        return ActionOutcome(float(self.is_success()), True, True)

    def text_observation(self) -> str:
        """The colour; once answered, the answer and whether it was right."""
        shown = f"The light is {self.colour}."
        if self.answer is None:
            return shown
        verdict = "right" if self.is_success() else "wrong"
        return f"{shown} You answered {self.answer}: {verdict}."

    def is_success(self) -> bool:
        """Answered the colour's right answer."""
        return self.answer is not None and self.answer == right_answer(self.colour)

    def baselines(self, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None) -> EnvBaselines:
        """`random` and `best_fixed_answer` (`four_choice_baselines`) on the episodes of `seeds` (None:
        `episodes` seeds from `HELD_OUT_SEED_START`)."""
        played = scored_seeds(episodes, seeds)
        note = "At or below best_fixed_answer the agent does not read the colour."
        success = four_choice_baselines(colour=self.config.colour, seeds=played)
        return EnvBaselines("FourChoice", "episodes", turns, success, note, {}, played)


def four_choice_baselines(
    episodes: int = 1000, colour: str | None = None, seeds: Sequence[int] | None = None
) -> dict[str, float]:
    """Success of the policies that ignore the colour, on the episodes of `seeds` (None: the `episodes`
    seeds from `HELD_OUT_SEED_START`).

    - `random`: a uniformly random letter, right with probability 1/4 whatever the colour (exact);
    - `best_fixed_answer`: the one letter that is right on the most of these episodes (measured; about 1/4,
      above it by the sampling noise of the colours drawn: 0.267 on the 1000 default seeds, 0.297 on the 64
      validation seeds from 10**9; 1.0 where `colour` shows one colour every episode, as the config's
      `colour` does). Any turn cap gives the same numbers: the first valid answer ends the episode.
    """
    env = FourChoiceEnv(render_mode=None, colour=colour)
    played = scored_seeds(episodes, seeds)
    counts = dict.fromkeys(ANSWERS, 0)
    for seed in played:
        env.reset(seed=seed)
        counts[right_answer(env.colour)] += 1
    return {"random": 1.0 / len(ANSWERS), "best_fixed_answer": max(counts.values()) / max(len(played), 1)}
