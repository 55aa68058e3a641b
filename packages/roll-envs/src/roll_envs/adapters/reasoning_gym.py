"""reasoning-gym tasks (`reasoning-gym`) played through roll: `make("reasoning_gym:basic_arithmetic")`.

One question per episode, one answer: the reward is reasoning-gym's own `score_answer` (1.0 for a correct
answer, partial credit where the task gives it) and the episode ends. The question passes through as
the observation; the instruction is reasoning-gym's own default system prompt, which asks for
`<answer>...</answer>` (`answer_format="tags"`; whitespace inside the answer is kept, so a multi-line
matrix is scored as written). With another `answer_format` the instruction says that format instead.
The tasks are generated procedurally from a seed: nothing is downloaded at run time (a few, such as
`arc_1d`/`arc_agi`, read data files shipped in the package).

Held-out questions: with `validation_size` N, the dataset's last N questions are the validation block and
`split` says which part an env plays. `train` draws from the others; `validation` plays the block's
questions whose text no training question has, the episode seed choosing one in order (`seed % count`),
so that consecutive validation seeds play distinct questions no training episode can meet.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from roll_envs.adapters import import_library
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig, turns_field
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
    max_steps: int = turns_field(1)
    answer_format: AnswerFormat = Field(
        AnswerFormat.TAGS, description="how answers are read (reasoning-gym: tags)"
    )
    validation_size: int = Field(
        0, ge=0, description="the dataset's last questions held out for validation (0: none held out)"
    )
    split: Literal["all", "train", "validation"] = Field(
        "all",
        description="the questions played: all of the dataset; train, all but the last validation_size;"
        " validation, those last ones whose text no training question has, the seed picking in order",
    )

    @model_validator(mode="after")
    def _split_fits(self) -> ReasoningGymConfig:
        if self.validation_size >= self.dataset_size:
            raise ValueError(
                f"validation_size ({self.validation_size}) must be below dataset_size ({self.dataset_size}):"
                " some questions must be left to train on"
            )
        if self.split != "all" and self.validation_size == 0:
            raise ValueError(
                f"split={self.split!r} needs validation_size > 0 (how many of the last questions are held out)"
            )
        return self


class ReasoningGymEnv(BaseEnv):
    """A reasoning-gym question per episode; reward: the task's score of the answer; success: score 1."""

    config_cls = ReasoningGymConfig
    config: ReasoningGymConfig
    # Some tasks draw from np.random (pool_matrix seeds it): undeclared, each env slot runs in a process of
    # its own, forked from one that has imported reasoning-gym already.
    process_preload = ("reasoning_gym",)

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
        self._seed: int | None = None
        self._held_out: tuple[int, ...] = ()
        if cfg.split == "validation":
            key = json.dumps(
                [cfg.env_id, cfg.dataset_seed, cfg.dataset_size, cfg.dataset_kwargs],
                sort_keys=True,
                default=str,
            )
            self._held_out = held_out_indices(
                self.dataset, cfg.validation_size, f"{key}/{cfg.validation_size}"
            )
        if cfg.split == "validation" and not self._held_out:
            raise EnvConfigError(
                f"reasoning_gym: every one of the last {cfg.validation_size} questions of {cfg.env_id!r} is"
                " also a training question. Fix: raise validation_size, or make the questions more varied"
                " (dataset_kwargs)."
            )

    @property
    def instruction(self) -> str:
        """reasoning-gym's default system prompt (tags), else a line in the configured answer format."""
        if self.config.answer_format == AnswerFormat.TAGS:
            return str(self._rg.utils.SYSTEM_PROMPTS["default"])
        return (
            "Given a problem, think step by step, then give only the final answer as "
            f"{self.format_answer('answer here')}."
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode; the validation split picks its question from the seed itself."""
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Pick the question: `rng`'s draw from the split's questions; in the validation split, the held-out
        question `seed % count` (a draw from `rng` when no seed is given)."""
        cfg = self.config
        if cfg.split == "validation":
            count = len(self._held_out)
            pick = self._seed % count if self._seed is not None else int(rng.integers(count))
            index = self._held_out[pick]
        else:
            index = int(rng.integers(cfg.dataset_size - (cfg.validation_size if cfg.split == "train" else 0)))
        self._entry = self.dataset[index]
        self._score = None

    def apply_action(self, action: str) -> ActionOutcome:
        """Score the answer with the task's `score_answer`; the episode ends."""
        self._score = float(self.dataset.score_answer(action, self._entry))
        return ActionOutcome(self._score, True)

    def demonstration(self) -> str | None:
        """The dataset's own answer to the question (reasoning-gym's `answer`), in the answer format; None
        once the question is answered."""
        if not self._entry or self._score is not None:
            return None
        return self.format_answer(str(self._entry["answer"]))

    def text_observation(self) -> str:
        """The question."""
        return str(self._entry.get("question", ""))

    def is_success(self) -> bool:
        """The answer scored 1.0."""
        return self._score is not None and self._score >= 1.0


_HELD_OUT: dict[str, tuple[int, ...]] = {}
"""`held_out_indices` of each dataset config already computed in this process (the envs of a validation
manager share one dataset config; each would otherwise regenerate its training questions)."""


def held_out_indices(dataset: Any, validation_size: int, key: str = "") -> tuple[int, ...]:
    """The indices of the last `validation_size` questions of `dataset` whose text is neither a training
    question's (an index before them) nor an earlier held-out one's: distinct questions, none seen in
    training. Generating the training questions takes seconds per 100,000: a non-empty `key` (the dataset's
    config) keeps the answer for the process's other envs."""
    if key and key in _HELD_OUT:
        return _HELD_OUT[key]
    size = len(dataset)
    training = {str(dataset[i]["question"]) for i in range(size - validation_size)}
    kept: list[int] = []
    for index in range(size - validation_size, size):
        text = str(dataset[index]["question"])
        if text not in training:
            training.add(text)  # a later copy of it is not distinct
            kept.append(index)
    if key:
        _HELD_OUT[key] = tuple(kept)
    return tuple(kept)
