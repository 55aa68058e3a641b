"""`BaseEnv`: a Gymnasium env whose observations are text and whose actions are raw model output.

An author implements a handful of hooks (`new_episode`, `apply_action`, `text_observation`,
`is_success`, `instruction`, and `valid_actions` unless the answer space is open); `reset` and `step` are
written once here: they read the answer in the env's `answer_format`, run up to `max_actions_per_turn`
actions in order, apply the format penalty and the step limit, and build an info dict with the keys every
consumer relies on.
"""

from __future__ import annotations

import string
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel

from roll_envs.baseline_types import EnvBaselines
from roll_envs.config import EnvConfig, build_config
from roll_envs.errors import EnvConfigError, ResetNeeded
from roll_envs.outcome import BASE_METRICS, ActionOutcome, Aggregation
from roll_envs.parsing import ActionMatcher, ParsedTurn, make_action_matcher, parse_turn, render_answer

_NO_MOVE: tuple[str, Mapping[str, float]] = ("", {})
"""The move a reset reports: nobody moved, nobody was rewarded."""

RENDER_MODES = ("text", "rgb_array")
TEXT_CHARSET = string.printable + "√·—–’“”…•×"
"""Characters a built-in observation may contain (the observation space's charset)."""


class BaseEnv(gym.Env[str, str], metaclass=ABCMeta):
    """A multi-turn text env: `reset(seed) -> (obs, info)`, `step(text) -> (obs, reward, terminated, truncated, info)`.

    Every info dict (from `reset` too) carries `action_is_valid` (the answer was read into actions),
    `action_is_refused` (the env refused one of them: `ActionOutcome.refused`), `action_is_effective`,
    `success`, `metrics` (floats; see `metric_aggregation`), `state_key` (a string identifying the state,
    used to group equal states), `executed_actions` and `elapsed_steps`. Everything is msgpack-friendly.

    Answers are read in the config's `answer_format` (`roll_envs.parsing.AnswerFormat`: `<answer>` tags by
    default, `\\boxed{}`, a JSON tool call or the raw text); `format_answer(*actions)` writes one, for the
    instruction. `valid_actions` lists the actions of the current state, or is None for an open answer
    space (a number, a matrix): then every non-empty answer reaches `apply_action`, which may refuse it.

    Several players (optional): a game of several players (`players`, e.g. `("X", "O")`) says whose turn
    it is (`current_player`); each `step` is that player's move, its observation is the next player's view,
    and its info adds `player` (who moved), `next_player` ("" once the game is over), `rewards` (every
    player's reward for the move: `ActionOutcome.rewards`) and `player_success`. `fixed_policies` names the
    scripted players the env offers for a seat (`fixed_policy_answer`); roll's env manager gives each seat
    to the trained policy (self-play) or to one of them, and trains each policy seat's turns as rows of their
    own (docs/envs/players.md).

    Construct with a config model, a mapping, keyword overrides or nothing:
    `FrozenLakeEnv(size=5)`, `FrozenLakeEnv(FrozenLakeConfig(size=5))`. `render_mode` is `"text"`
    (the default), `"rgb_array"` or None.

    Baselines (optional): an env with reference policies to judge a trained agent by overrides
    `baselines(turns, episodes, seeds=None)` to return their success rates as `EnvBaselines`, scored on
    the episodes of `seeds` (a run passes its validation seeds), else on `episodes` episodes seeded from
    `HELD_OUT_SEED_START` (`roll_envs.baseline_types`).
    `has_baselines` says, without computing them, whether it has any: by default whether the class
    overrides `baselines`; an env whose baselines depend on its config overrides it too (FrozenLake has
    none on slippery ice). `roll_envs.env_baselines(env, turns)` and `roll_envs.has_baselines(env)`
    go through these two hooks, so the pipeline prints and plots a third-party env's baselines as it does
    the built-ins'.

    Demonstrations (optional): `demonstration()` gives an expert's answer for the current state (FrozenLake:
    the first move of a shortest path to the goal), None without an expert.

    Random state: `owns_random_state` (class attribute, default False) declares that the env's `reset`,
    `step`, `render` and `close` draw only from its own generators (the `rng` of `new_episode`,
    `self.np_random`, a `random.Random` of its own), never from the process-wide `random` or `np.random`.
    roll's env manager then runs those calls concurrently, without swapping a per-env state of the global
    generators in (which serialises every undeclared env's calls of a worker behind one lock). Leave it
    False for an env that (or whose library) uses the global generators; `check_env` tells which is right.

    Hosting hints (`owns_random_state`, `never_blocks`) are promises about code, so a subclass that defines
    methods of its own does not inherit them (`roll_envs.hints`): it declares each again that its code keeps.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": 4}
    config_cls: ClassVar[type[EnvConfig]] = EnvConfig
    metric_aggregation: ClassVar[Mapping[str, Aggregation]] = BASE_METRICS
    max_observation_chars: ClassVar[int] = 20_000
    owns_random_state: ClassVar[bool] = False
    """True: reset/step/render/close never touch `random` or `np.random`, so roll runs them concurrently
    without isolating the global generators (see the class docstring; `check_env` verifies it). Holds only
    for the declaring class and subclasses adding no methods (`roll_envs.hints`)."""
    never_blocks: ClassVar[bool] = False
    """True: reset/step are bounded computations on in-memory state (no I/O, no subprocess, no sleep, no
    unbounded loop), so roll may run a fast one directly on its env worker's event loop, saving a thread hop
    (`roll_rollout.hosting.call_pace`). A call that blocked there could not be timed out: declare it only when that
    cannot happen. roll's built-in games declare it; the sandbox does not. Holds only for the declaring class
    and subclasses adding no methods (`roll_envs.hints`): a subclass whose step waits does not inherit it."""
    process_preload: ClassVar[tuple[str, ...]] = ()
    """Modules the env imports when it is built (a library imported lazily, such as `reasoning_gym`): roll
    imports them, with the env's own module, once in the parent its env processes are forked from, so that
    each undeclared env's process shares their memory instead of importing its own copy (about 100 MB
    each for reasoning-gym; `roll_rollout.hosting.env_process`). A module that fails to import there is skipped."""

    def __init__(
        self,
        config: BaseModel | Mapping[str, Any] | None = None,
        *,
        render_mode: str | None = "text",
        **overrides: Any,
    ) -> None:
        self.config = build_config(self.config_cls, config, overrides, type(self).__name__)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise EnvConfigError(
                f"env {type(self).__name__!r}: render_mode {render_mode!r} is not supported; "
                f"expected one of {self.metadata['render_modes']} or None."
            )
        self.render_mode = render_mode
        self.observation_space = spaces.Text(
            max_length=self.max_observation_chars, min_length=0, charset=TEXT_CHARSET
        )
        self.action_space = spaces.Text(max_length=256, min_length=0)
        self._matcher: ActionMatcher | None = None
        self._matcher_vocabulary: tuple[str, ...] = ()
        self._started = False
        self._elapsed = 0
        self._terminated = False
        self._truncated = False

    # ---- hooks an author implements -------------------------------------------------------------

    @property
    @abstractmethod
    def instruction(self) -> str:
        """The system prompt: what the game is, its symbols, the actions and the answer format."""

    @property
    def valid_actions(self) -> list[str] | None:
        """The actions of the current state in canonical spelling (matched case-insensitively by the default
        `match_action`), or None (the default) for an open answer space, where any non-empty answer is the
        action and `apply_action` judges it."""
        return None

    @abstractmethod
    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Build the initial state of a new episode, drawing all randomness from `rng`."""

    @abstractmethod
    def apply_action(self, action: str) -> ActionOutcome:
        """Apply one canonical action (an element of `valid_actions` or accepted by `match_action`);
        return `ActionOutcome.refuse()` for an action the rules do not allow in this state."""

    @abstractmethod
    def text_observation(self) -> str:
        """The current state as text (also what `render()` returns in `text` mode)."""

    @abstractmethod
    def is_success(self) -> bool:
        """Whether the current state counts as solving the task."""

    # ---- optional hooks -------------------------------------------------------------------------

    def match_action(self, token: str) -> str | None:
        """Map one action text to a canonical action or None. Default: a case-insensitive lookup in the
        current state's `valid_actions` (rebuilt whenever they change); with None, the text itself."""
        actions = self.valid_actions
        if actions is None:
            return token or None
        vocabulary = tuple(actions)
        if self._matcher is None or vocabulary != self._matcher_vocabulary:
            self._matcher, self._matcher_vocabulary = make_action_matcher(vocabulary), vocabulary
        return self._matcher(token)

    def episode_metrics(self) -> dict[str, float]:
        """Env-specific metrics of the current step (declare their aggregation in `metric_aggregation`)."""
        return {}

    def state_key(self, observation: str) -> str:
        """A string equal for equal states (GiGPO groups turns by it); default: the observation."""
        return observation

    def render_frame(self) -> np.ndarray:
        """An RGB frame (H, W, 3) uint8 of the current state; default: the text drawn on a canvas."""
        from roll_envs.frames import text_frame

        return text_frame(self.text_observation())

    def baselines(
        self, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None
    ) -> EnvBaselines | None:
        """Reference policies' success within `turns` turns on the episodes of `seeds` (None: `episodes`
        seeds from `HELD_OUT_SEED_START`), as `EnvBaselines`; default None: this env has no baselines."""
        return None

    @property
    def has_baselines(self) -> bool:
        """Whether `baselines` gives numbers, answered without computing them; default: whether the class
        overrides `baselines` (override this too when that depends on the config)."""
        return type(self).baselines is not BaseEnv.baselines

    def demonstration(self) -> str | None:
        """An expert's answer for the current state, in the env's answer format (`self.format_answer(action)`),
        or None when the env has no expert or the episode has ended; default None. It reads the state and
        changes nothing (no step, no draw); `check_env` plays it and requires a valid answer."""
        return None

    # ---- several players (optional hooks) -------------------------------------------------------

    @property
    def players(self) -> tuple[str, ...]:
        """The players of a multi-player game in seat order (e.g. `("X", "O")`); () for one agent (default)."""
        return ()

    @property
    def current_player(self) -> str:
        """The player whose move the next `step` is ("" for one agent, or once the game is over)."""
        return ""

    @property
    def fixed_policies(self) -> tuple[str, ...]:
        """Names of the scripted players that can take a seat (`fixed_policy_answer`); default none."""
        return ()

    def fixed_policy_answer(self, name: str) -> str:
        """The turn text (in the env's answer format) the scripted player `name` plays for `current_player`
        now, drawing any randomness from the episode's generator (`np_random`)."""
        raise EnvConfigError(
            f"env {type(self).__name__!r} has no fixed policy {name!r}; it offers {list(self.fixed_policies)}."
        )

    def player_success(self, player: str) -> bool:
        """Whether `player` succeeded (won) in the current state; default: `is_success()`."""
        return self.is_success()

    # ---- the Gymnasium API, written once --------------------------------------------------------

    @property
    def action_lookup(self) -> dict[int, str]:
        """`valid_actions` indexed from 0, as in RAGEN/ROLL configs (empty for an open answer space)."""
        return dict(enumerate(self.valid_actions or ()))

    @property
    def elapsed_steps(self) -> int:
        """Calls to `step` since the last `reset`."""
        return self._elapsed

    def format_answer(self, *actions: str) -> str:
        """The text of a turn answering `actions` in this env's answer format, e.g. `<answer>Left</answer>`
        (for instructions and scripted play; `step` reads it back)."""
        return render_answer(actions, self.config.answer_format)

    def multi_action_hint(self, noun: str = "actions") -> str:
        """The instruction sentence allowing several actions (leading space), or "" at one per turn."""
        cap = self.config.max_actions_per_turn
        if cap <= 1:
            return ""
        how = "as a JSON list of calls" if self.config.answer_format == "tool_call" else "separated by ||"
        return f" You may give up to {cap} {noun} {how}."

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode; the same seed gives the same episode."""
        super().reset(seed=seed)
        self.new_episode(self.np_random, dict(options or {}))
        self._started = True
        self._elapsed = 0
        self._terminated = False
        self._truncated = False
        obs = self.text_observation()
        return obs, self._info(obs, True, False, False, (), {}, _NO_MOVE)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Parse the model's text, execute its actions in order and report the turn."""
        if not self._started:
            raise ResetNeeded(
                f"{type(self).__name__}.step() was called before reset(); call env.reset(seed=...) first."
            )
        cfg = self.config
        parsed = parse_turn(action, self.match_action, cfg.max_actions_per_turn, cfg.answer_format)
        if self._terminated or self._truncated:
            return self._after_end(parsed)
        mover = self.current_player
        rewards: dict[str, float] = {}
        effective, refused, executed = False, False, []
        for name in parsed.actions:
            outcome = self.apply_action(name)
            for player, value in (outcome.rewards or {mover: outcome.reward}).items():
                rewards[player] = rewards.get(player, 0.0) + float(value)
            refused = bool(outcome.refused)
            if not refused:
                executed.append(name)
                effective = effective or bool(outcome.effective)
            if outcome.terminated:
                self._terminated = True
            if refused or outcome.terminated:
                break
        if not parsed.valid:
            rewards[mover] = rewards.get(mover, 0.0) - cfg.format_penalty
        self._elapsed += 1
        self._truncated = not self._terminated and self._elapsed >= cfg.max_steps
        obs = self.text_observation()
        metrics = self._step_metrics(parsed, refused, effective, executed)
        info = self._info(obs, parsed.valid, refused, effective, executed, metrics, (mover, rewards))
        return obs, rewards.get(mover, 0.0), self._terminated, self._truncated, info

    def render(self, mode: str | None = None) -> Any:  # type: ignore[override]
        """The current state in `mode` (default: the env's `render_mode`): text or an RGB array."""
        mode = mode or self.render_mode
        if mode is None:
            return None
        if not self._started:
            raise ResetNeeded(
                f"{type(self).__name__}.render() needs a state; call env.reset(seed=...) first."
            )
        if mode == "text":
            return self.text_observation()
        if mode == "rgb_array":
            return self.render_frame()
        raise EnvConfigError(f"render mode {mode!r} is not supported; expected one of {list(RENDER_MODES)}.")

    # ---- helpers ---------------------------------------------------------------------------------

    def _step_metrics(
        self, parsed: ParsedTurn, refused: bool, effective: bool, executed: list[str]
    ) -> dict[str, float]:
        metrics = {
            "success": float(self.is_success()),
            "action_is_valid": float(parsed.valid),
            "action_is_refused": float(refused),
            "action_is_effective": float(effective),
            "num_actions": float(len(executed)),
        }
        metrics.update({k: float(v) for k, v in self.episode_metrics().items()})
        return metrics

    def _after_end(self, parsed: ParsedTurn) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Stepping a finished episode is a no-op with reward 0 (as Gymnasium's toy-text envs do)."""
        obs = self.text_observation()
        metrics = self._step_metrics(parsed, False, False, [])
        info = self._info(obs, parsed.valid, False, False, (), metrics, (self.current_player, {}))
        return obs, 0.0, self._terminated, self._truncated, info

    def _info(
        self,
        obs: str,
        valid: bool,
        refused: bool,
        effective: bool,
        executed: tuple[str, ...] | list[str],
        metrics: dict[str, float],
        move: tuple[str, Mapping[str, float]],
    ) -> dict[str, Any]:
        info = {
            "action_is_valid": bool(valid),
            "action_is_refused": bool(refused),
            "action_is_effective": bool(effective),
            "success": bool(self.is_success()),
            "metrics": metrics,
            "state_key": self.state_key(obs),
            "executed_actions": list(executed),
            "elapsed_steps": self._elapsed,
        }
        if self.players:
            info.update(self._players_info(*move))
        return info

    def _players_info(self, mover: str, rewards: Mapping[str, float]) -> dict[str, Any]:
        """The info keys of a multi-player game (see the class docstring)."""
        over = self._terminated or self._truncated
        return {
            "player": mover,
            "next_player": "" if over else self.current_player,
            "rewards": {p: float(rewards.get(p, 0.0)) for p in self.players},
            "player_success": {p: bool(self.player_success(p)) for p in self.players},
        }
