"""Wrap any Gymnasium env with a discrete action space into a text env: names for the actions and a
function that draws the state as text. CliffWalking and Taxi work out of the box.

    >>> env = GymAdapterEnv(gym_id=latest_gym_id("CliffWalking"))
    >>> obs, info = env.reset(seed=0)
    >>> print(obs.splitlines()[-1])
    PCCCCCCCCCCG
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import Field

from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig, turns_field
from roll_envs.errors import EnvConfigError

Renderer = Callable[[Any, Any], str]
"""(unwrapped Gymnasium env, its observation) -> the state as text."""

SuccessTest = Callable[[float, bool], bool]
"""(last reward, terminated) -> whether the episode was won."""


def positive_termination(reward: float, terminated: bool) -> bool:
    """Default success test: the episode terminated on a positive reward."""
    return terminated and reward > 0


def any_termination(reward: float, terminated: bool) -> bool:
    """Success test of games whose only terminal state is the goal (CliffWalking)."""
    return terminated


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cliff_walking_text(env: Any, obs: Any) -> str:
    """CliffWalking grid: `P` you, `C` cliff, `G` goal, `_` ground."""
    nrow, ncol = env.shape
    cells = [["_"] * ncol for _ in range(nrow)]
    for c in range(1, ncol - 1):
        cells[nrow - 1][c] = "C"
    cells[nrow - 1][ncol - 1] = "G"
    row, col = divmod(int(obs), ncol)
    cells[row][col] = "P"
    return "\n".join("".join(r) for r in cells)


def taxi_text(env: Any, obs: Any) -> str:
    """Taxi map with the taxi as `T`, then where the passenger is and where they go."""
    taxi_row, taxi_col, passenger, destination = env.decode(int(obs))
    rows = [[ch.decode() for ch in line] for line in env.desc.tolist()]
    rows[1 + taxi_row][2 * taxi_col + 1] = "T"
    names = "RGYB"
    where = "in the taxi" if passenger == 4 else f"at {names[passenger]}"
    return "\n".join("".join(r) for r in rows) + f"\nPassenger: {where}. Destination: {names[destination]}."


def ansi_text(env: Any, obs: Any) -> str:
    """The env's own `ansi` rendering without colour codes, else the observation as text."""
    if getattr(env, "render_mode", None) == "ansi":
        return _ANSI.sub("", str(env.render())).strip("\n")
    return str(obs.tolist() if isinstance(obs, np.ndarray) else obs)


@dataclass(frozen=True)
class GameText:
    """How a known Gymnasium game is shown to a model: action names, renderer and instruction.

    `format_penalty` is the game's default penalty of an answer with no valid action: minus the worst
    reward one action can get, so that garbage never scores more than playing.
    """

    actions: tuple[str, ...]
    renderer: Renderer
    instruction: str
    success: SuccessTest = positive_termination
    format_penalty: float = 0.0


KNOWN_GAMES: dict[str, GameText] = {
    "CliffWalking": GameText(
        ("Up", "Right", "Down", "Left"),
        cliff_walking_text,
        "Walk from the start to the goal G along the cliff. P is you, C is the cliff, _ is ground. "
        "Each move costs 1 point; stepping on the cliff costs 100 and sends you back to the start.",
        any_termination,
        format_penalty=100.0,  # a step onto the cliff
    ),
    "Taxi": GameText(
        ("Down", "Up", "Right", "Left", "Pickup", "Dropoff"),
        taxi_text,
        "Drive the taxi T to the passenger, pick them up, drive to the destination and drop them off. "
        "R, G, Y and B are the stops; | is a wall. Each move costs 1 point, a wrong pickup or dropoff 10.",
        format_penalty=10.0,  # a wrong pickup or dropoff
    ),
}
"""Text front ends of Gymnasium games, keyed by the name before the version."""


class GymAdapterConfig(EnvConfig):
    """Config of `GymAdapterEnv` (plus `max_steps`, `format_penalty`, `max_actions_per_turn`)."""

    max_steps: int = turns_field(100)
    format_penalty: float = Field(
        0.0,
        ge=0.0,
        description="subtracted from the reward of a turn whose answer is not a valid action; when not set,"
        " a known game's own (CliffWalking 100, Taxi 10: minus its worst reward for one action)",
    )
    gym_id: str | None = Field(None, description="Gymnasium id, e.g. 'Taxi-v4' (or pass gym_env= in Python)")
    gym_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of gymnasium.make"
    )
    action_names: list[str] | None = Field(None, description="name of each discrete action, in index order")
    renderer: str | None = Field(None, description="'module:function' taking (env, obs) and returning text")
    instruction: str | None = Field(None, description="the system prompt (default: one for the known games)")


def latest_gym_id(name: str) -> str:
    """The newest registered version of a Gymnasium env name, e.g. 'Taxi' -> 'Taxi-v4'."""
    versions = [k for k in gym.registry if re.fullmatch(rf"{re.escape(name)}-v\d+", k)]
    if not versions:
        raise EnvConfigError(
            f"gym_adapter: Gymnasium has no env named {name!r}; check gymnasium.pprint_registry()."
        )
    return max(versions, key=lambda k: int(k.rsplit("-v", 1)[1]))


def _load_renderer(path: str) -> Renderer:
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise EnvConfigError(
            f"gym_adapter: renderer {path!r} does not load ({exc}); expected 'module:function'."
        ) from exc


class GymAdapterEnv(BaseEnv):
    """A Gymnasium env with a `Discrete` action space, played through text.

    Give either `gym_id` (config) or `gym_env=` (an env object, Python only), optionally
    `render_fn=` / `renderer`, `action_names`, `instruction` and `success_fn=`. Rewards and
    terminations pass through; `success` is, by default, a termination with a positive reward.
    """

    config_cls = GymAdapterConfig
    config: GymAdapterConfig

    def __init__(
        self,
        config: Any = None,
        *,
        render_mode: str | None = "text",
        gym_env: gym.Env | None = None,
        render_fn: Renderer | None = None,
        success_fn: SuccessTest | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        cfg = self.config
        if gym_env is None and cfg.gym_id is None:
            raise EnvConfigError(
                "gym_adapter: set gym_id (e.g. 'Taxi-v4') or pass gym_env=<a Gymnasium env>."
            )
        if gym_env is None:
            try:
                gym_env = gym.make(cfg.gym_id, disable_env_checker=True, **cfg.gym_kwargs)
            except gym.error.Error as exc:
                raise EnvConfigError(f"gym_adapter: gymnasium.make({cfg.gym_id!r}) failed: {exc}") from exc
        self.inner = gym_env.unwrapped  # our max_steps replaces Gymnasium's TimeLimit
        if not isinstance(self.inner.action_space, gym.spaces.Discrete):
            raise EnvConfigError(
                f"gym_adapter: expected a Discrete action space; {type(self.inner).__name__} has "
                f"{self.inner.action_space}. Wrap it so that its actions are numbered first."
            )
        game = KNOWN_GAMES.get(type(self.inner).__name__.removesuffix("Env"))
        if game is None and self.inner.spec is not None:
            game = KNOWN_GAMES.get(self.inner.spec.name)
        n = int(self.inner.action_space.n)
        names = cfg.action_names or (list(game.actions) if game else [str(i) for i in range(n)])
        if len(names) != n:
            raise EnvConfigError(
                f"gym_adapter: action_names has {len(names)} names; the env has {n} actions."
            )
        self._names = list(names)
        self._render = render_fn or (_load_renderer(cfg.renderer) if cfg.renderer else None)
        self._render = self._render or (game.renderer if game else ansi_text)
        self._game_text = cfg.instruction or (
            game.instruction if game else f"Play {type(self.inner).__name__}."
        )
        self._success = success_fn or (game.success if game else positive_termination)
        if game is not None and "format_penalty" not in cfg.model_fields_set:
            self.config = cfg.model_copy(update={"format_penalty": game.format_penalty})
        self._obs: Any = None
        self._last: tuple[float, bool] = (0.0, False)

    @property
    def instruction(self) -> str:
        """The game's description, its actions and the answer format."""
        multi = self.multi_action_hint("actions")
        return (
            f"{self._game_text} Actions: {', '.join(self._names)}.{multi} "
            f"Answer with one action, like {self.format_answer(self._names[0])}."
        )

    @property
    def valid_actions(self) -> list[str]:
        """The action names, in the env's index order."""
        return list(self._names)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Reset the wrapped env with a seed drawn from `rng`."""
        self._obs, _ = self.inner.reset(seed=int(rng.integers(2**31)), options=options or None)
        self._last = (0.0, False)

    def apply_action(self, action: str) -> ActionOutcome:
        """Step the wrapped env with the action's index."""
        before = self.text_observation()
        obs, reward, terminated, truncated, _ = self.inner.step(self._names.index(action))
        self._obs = obs
        self._last = (float(reward), bool(terminated))
        return ActionOutcome(float(reward), bool(terminated or truncated), self.text_observation() != before)

    def text_observation(self) -> str:
        """The renderer's text of the current state."""
        return self._render(self.inner, self._obs)

    def is_success(self) -> bool:
        """The game's success test on the last reward and termination (default: terminated, reward > 0)."""
        reward, terminated = self._last
        return bool(self._success(reward, terminated))

    def close(self) -> None:
        """Close the wrapped env."""
        self.inner.close()
