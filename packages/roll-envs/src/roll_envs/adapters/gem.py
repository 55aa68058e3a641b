r"""GEM envs (`gem-llm`) played through roll: `make("gem:game:Minesweeper-v0-easy")`.

GEM's own text passes through: the first observation is GEM's instructions and board, each later one
GEM's feedback and board (its `info["suffix"]` appended, as GEM's own wrappers do). Answers are read as
GEM reads them, `\boxed{...}` (`answer_format="boxed"`), and handed to GEM as `\boxed{answer}`. An answer
with no `\boxed{}` costs `format_penalty` (0.1, GEM's own) and does not reach GEM, so the episode goes on
(GEM itself would end it). GEM's `math:`, `code:` and `qa:` envs download data sets at run time;
the `game:` envs do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from roll_envs.adapters import import_library
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig, turns_field
from roll_envs.errors import EnvConfigError
from roll_envs.parsing import AnswerFormat, render_answer


class GemConfig(EnvConfig):
    """Config of `GemEnv`: GEM's id and keyword arguments (plus the `EnvConfig` fields)."""

    env_id: str = Field(..., description="GEM id, e.g. 'game:Minesweeper-v0-easy' (gem.envs.registration)")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of gem.make")
    max_steps: int = turns_field(50)
    format_penalty: float = Field(0.1, ge=0.0, description="subtracted from a turn with no readable answer")
    answer_format: AnswerFormat = Field(AnswerFormat.BOXED, description="how answers are read (GEM: boxed)")


class GemEnv(BaseEnv):
    """A GEM env: GEM's observations and rewards; success is a termination on a positive reward."""

    config_cls = GemConfig
    config: GemConfig

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        gem = import_library("gem", "gem")
        try:
            self.inner = gem.make(self.config.env_id, **self.config.env_kwargs)
        except (ValueError, KeyError) as exc:
            raise EnvConfigError(
                f"gem: gem.make({self.config.env_id!r}) failed: {exc}. "
                "Fix: use an id from gem.envs.registration.ENV_REGISTRY, e.g. 'game:Minesweeper-v0-easy'."
            ) from exc
        self._obs = ""
        self._last = (0.0, False)

    @property
    def instruction(self) -> str:
        """A fixed line; GEM's own instructions come in the first observation."""
        return (
            f"You are playing the GEM environment {self.config.env_id}. Its rules come in the first message. "
            f"Give each move as {self.format_answer('your move')}."
        )

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Reset GEM with a seed drawn from `rng`."""
        obs, info = self.inner.reset(seed=int(rng.integers(2**31)))
        self._obs = _with_suffix(obs, info)
        self._last = (0.0, False)

    def apply_action(self, action: str) -> ActionOutcome:
        """Step GEM with `\\boxed{action}`."""
        obs, reward, terminated, truncated, info = self.inner.step(
            render_answer([action], AnswerFormat.BOXED)
        )
        self._obs = _with_suffix(obs, info)
        self._last = (float(reward), bool(terminated))
        return ActionOutcome(float(reward), bool(terminated or truncated))

    def text_observation(self) -> str:
        """GEM's last observation, its `info["suffix"]` appended."""
        return self._obs

    def is_success(self) -> bool:
        """GEM ended the episode on a positive reward."""
        reward, terminated = self._last
        return terminated and reward > 0


def _with_suffix(obs: Any, info: Any) -> str:
    suffix = info.get("suffix") if isinstance(info, dict) else None
    return f"{obs}\n{suffix}" if suffix else str(obs)
