"""reasoning-gym tasks (`reasoning-gym`) played through roll: `make("reasoning_gym:basic_arithmetic")`.

One question per episode, one answer: the reward is reasoning-gym's own `score_answer` (1.0 for a correct
answer, partial credit where the task gives it) and the episode ends. The question passes through as
the observation; the instruction is reasoning-gym's own default system prompt, which asks for
`<answer>...</answer>` (`answer_format="tags"`; whitespace inside the answer is kept, so a multi-line
matrix is scored as written). With another `answer_format` the instruction says that format instead.
The tasks are generated procedurally from a seed: nothing is downloaded at run time (a few, such as
`arc_1d`/`arc_agi`, read data files shipped in the package).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from roll_envs.adapters import import_library
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig
from roll_envs.errors import EnvConfigError
from roll_envs.parsing import AnswerFormat


class ReasoningGymConfig(EnvConfig):
    """Config of `ReasoningGymEnv`: the task name and its dataset settings (plus the `EnvConfig` fields)."""

    env_id: str = Field(..., description="reasoning-gym dataset name, e.g. 'basic_arithmetic'")
    dataset_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of reasoning_gym.create_dataset (task settings)"
    )
    dataset_size: int = Field(100_000, ge=1, description="questions an episode's seed chooses from")
    dataset_seed: int = Field(0, description="seed of the dataset (the episode seed picks a question in it)")
    max_steps: int = Field(1, ge=1, le=100_000, description="turns before the episode is truncated")
    answer_format: AnswerFormat = Field(
        AnswerFormat.TAGS, description="how answers are read (reasoning-gym: tags)"
    )


class ReasoningGymEnv(BaseEnv):
    """A reasoning-gym question per episode; reward: the task's score of the answer; success: score 1."""

    config_cls = ReasoningGymConfig
    config: ReasoningGymConfig

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self._rg = import_library("reasoning_gym", "reasoning-gym")
        cfg = self.config
        try:
            self.dataset = self._rg.create_dataset(
                cfg.env_id, size=cfg.dataset_size, seed=cfg.dataset_seed, **cfg.dataset_kwargs
            )
        except Exception as exc:  # unknown name (ValueError) or bad settings (assertion, TypeError)
            raise EnvConfigError(
                f"reasoning_gym: create_dataset({cfg.env_id!r}) failed: {exc!r}. "
                "Fix: use a name from reasoning_gym.factory.DATASETS and its own settings."
            ) from exc
        self._entry: dict[str, Any] = {}
        self._score: float | None = None

    @property
    def instruction(self) -> str:
        """reasoning-gym's default system prompt (tags), else a line in the configured answer format."""
        if self.config.answer_format == AnswerFormat.TAGS:
            return str(self._rg.utils.SYSTEM_PROMPTS["default"])
        return (
            "Given a problem, think step by step, then give only the final answer as "
            f"{self.format_answer('answer here')}."
        )

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Pick the question `rng` draws from the dataset."""
        self._entry = self.dataset[int(rng.integers(self.config.dataset_size))]
        self._score = None

    def apply_action(self, action: str) -> ActionOutcome:
        """Score the answer with the task's `score_answer`; the episode ends."""
        self._score = float(self.dataset.score_answer(action, self._entry))
        return ActionOutcome(self._score, True)

    def text_observation(self) -> str:
        """The question."""
        return str(self._entry.get("question", ""))

    def is_success(self) -> bool:
        """The answer scored 1.0."""
        return self._score is not None and self._score >= 1.0
