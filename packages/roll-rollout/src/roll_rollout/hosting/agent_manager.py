"""The `openai_agent` env type: an unmodified OpenAI-client agent plays each episode through the proxy.

A tag with `env_type: openai_agent` names its agent and where its tasks come from:

    env_config:
      agent: my_agent:run          # module:function, or path/to/file.py:function
      task_env: four_choice        # any registered roll env: its reset gives the task, its step checks answers
      task_env_config: {}
      agent_timeout_s: 600
      demonstration_tool: {name: move, argument: direction}   # only for demonstration_steps (below)

Per episode the task env is reset with the episode's seed and the agent is called, in a thread of its own,
as `agent(base_url, task)`: `base_url` is the episode's own address on the worker's `AgentProxy`, `task`
is `{"prompt": <the reset observation>, "instruction": <the env's instruction>, "actions": <the env's
`valid_actions`, [] when it has none>, "seed": <seed>, "tag": <tag>, "step_url": <base_url>/env/step}`.
An agent whose tools act on the task env (a multi-turn task: FrozenLake's `move`) posts `{"action": ...}`
to `step_url` and gets `{"observation", "reward", "done", "success"}` back (roll_rollout.hosting.agent_env_tools);
such an agent returns None: the episode's reward is the sum of those steps' rewards (0 when it made none:
the env was never acted on) and its success the last step's. Otherwise what the agent returns is its
episode's outcome:

- a number: the reward;
- a string, or a dict with `"answer"`: the answer, which the task env's `step` checks (its reward and
  `info["success"]` are the episode's). A bare action of the env's `valid_actions` (e.g. `C`) is written in
  the env's answer format first (`env.format_answer`, e.g. `<answer>C</answer>`); any other text is stepped
  as it is, as a model's turn would be;
- a dict with `"reward"` (and optionally `"success"`): those.

With `demonstration_steps` (behaviour cloning), a tag that names its `demonstration_tool` has each call of a
demonstrated episode answered by the task env: its demonstrated action as a call of that tool
(`agent_env_tools.Demonstrator`), which the agent runs as it would a sampled one.

Each call the agent made through the proxy (chat.completions or responses) becomes one `Turn` (in call
order): its prompt ids exactly as the policy was given them, the sampled ids and log-probs (up to a
request's stop string); the episode's reward goes on the last turn. Where each call's prompt starts with
the previous call's prompt + sampled ids, the calls are one conversation (`sample_shape: trajectory`
trains it as one row, GiGPO anchors each call on what it added); where not, each call trains as its own
row and the episode counts in `agent_unchained` (roll_rollout.hosting.agent_turns).

An agent that raises ends the episode as `env_error`, one that outlives `agent_timeout_s` as
`env_timeout` (its thread is left to finish: Python cannot stop it), a failed generation as
`policy_error`; an episode whose calls outran `max_actions_per_traj` or `sequence_length` ends truncated
with the calls made so far and reward 0. Every episode, failed or not, says in its metrics which of
`agent_ends.END_KINDS` it ended in (`end/<kind>`), and each call's turn whether its reply was read in full
(`action_is_valid`; roll_rollout.hosting.agent_ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_envs.hints import declares_own_random_state
from roll_envs.random_state import DEFAULT_SEED, EnvRandomState

from roll_rollout.errors import RolloutError
from roll_rollout.hosting.agent_ends import (
    AgentFailed,
    AgentTimeout,
    end_metrics,
    failed_end,
    stopped_end,
)
from roll_rollout.hosting.agent_env_tools import Demonstrator, TaskEnvSteps, demonstration_tool
from roll_rollout.hosting.agent_turns import UNCHAINED_METRIC, calls_to_turns
from roll_rollout.hosting.env_calls import EnvCallError, EnvCalls, EnvCallTimeout
from roll_rollout.hosting.env_checks import close_quietly, finite_reward
from roll_rollout.hosting.env_manager import EpisodeJob
from roll_rollout.hosting.players import manager_metrics
from roll_rollout.plan.seeds import sample_key
from roll_rollout.policies.agent_proxy import AgentProxy, AgentSession
from roll_rollout.policies.policy import PolicyClient
from roll_rollout.schema import Trajectory

AGENT_ENV_TYPE = "openai_agent"
"""The `env_type` of a tag whose episodes an OpenAI-client agent plays."""


class AgentConfigError(RolloutError):
    """An `openai_agent` tag's `env_config` that cannot work; the message says what to write instead."""


@dataclass(frozen=True)
class AgentConfig:
    """An `openai_agent` tag's `env_config` (see the module docstring)."""

    agent: str
    task_env: str
    task_env_config: dict[str, Any] = field(default_factory=dict)
    agent_timeout_s: float = 600.0
    demonstration_tool: tuple[str, str] | None = (
        None  # (tool name, argument) a demonstrated call answers with
    )

    @classmethod
    def from_env_config(cls, env_config: Mapping[str, Any]) -> AgentConfig:
        known = {"agent", "task_env", "task_env_config", "agent_timeout_s", "demonstration_tool"}
        unknown = sorted(set(env_config) - known)
        if unknown:
            raise AgentConfigError(
                f"openai_agent env_config has unknown keys {unknown}; it takes {sorted(known)}"
            )
        agent, task_env = env_config.get("agent"), env_config.get("task_env")
        if not (isinstance(agent, str) and agent.count(":") == 1 and all(agent.split(":"))):
            raise AgentConfigError(
                f"openai_agent env_config.agent must be 'module:function' or 'path/to/file.py:function', got {agent!r}"
            )
        if not (isinstance(task_env, str) and task_env):
            raise AgentConfigError(
                "openai_agent env_config.task_env must name a registered roll env that gives the tasks, "
                f"e.g. four_choice; got {task_env!r}"
            )
        task_config = env_config.get("task_env_config") or {}
        timeout = env_config.get("agent_timeout_s", 600.0)
        if not isinstance(task_config, Mapping) or not (isinstance(timeout, int | float) and timeout > 0):
            raise AgentConfigError(
                "openai_agent env_config needs task_env_config a mapping and agent_timeout_s > 0"
            )
        try:
            tool = demonstration_tool(env_config.get("demonstration_tool"))
        except ValueError as exc:
            raise AgentConfigError(f"openai_agent env_config.{exc}") from None
        return cls(agent, task_env, dict(task_config), float(timeout), tool)


def load_agent(ref: str) -> Callable[[str, dict[str, Any]], Any]:
    """The function `ref` names: `module:function`, or `path/to/file.py:function` (relative to the cwd)."""
    module_name, _, attr = ref.partition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            name = f"roll_agent_{hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest()}"
            module = sys.modules.get(name)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(name, path)
                if loader_spec is None or loader_spec.loader is None or not path.is_file():
                    raise ImportError(f"no Python file at {path}")
                module = importlib.util.module_from_spec(loader_spec)
                loader_spec.loader.exec_module(module)
                sys.modules[name] = module
        else:
            module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise AgentConfigError(
            f"openai_agent agent {ref!r} does not load ({type(exc).__name__}: {exc}). Fix: name an importable "
            "module and a function in it, or a .py file relative to the working directory"
        ) from exc
    if not callable(fn):
        raise AgentConfigError(f"openai_agent agent {ref!r} is a {type(fn).__name__}, not a function")
    return fn


class AgentEnvManager:
    """Plays an `openai_agent` tag's episodes on one env slot (same `run_episode` / `close` as TrajEnvManager)."""

    def __init__(
        self,
        config: AgentConfig,
        make_task_env: Callable[[], Any],
        tag: str,
        proxy: AgentProxy,
        max_calls: int,
        max_context_tokens: int,
        calls: EnvCalls,
        env: Any | None = None,
        random_state: EnvRandomState | None = None,
    ) -> None:
        self.config, self._make_env, self.tag, self.proxy = config, make_task_env, tag, proxy
        self.agent = load_agent(config.agent)
        self.max_calls, self.max_context_tokens, self.calls = max_calls, max_context_tokens, calls
        self.env = env
        self.random_state = random_state if random_state is not None else EnvRandomState()

    async def run_episode(self, job: EpisodeJob, policy: PolicyClient) -> Trajectory:
        """Play one episode; never raises (but can be cancelled)."""
        traj = Trajectory(job.env_id, job.group_id, job.episode_id, self.tag, job.seed)
        try:
            await self._play(traj, job, policy)
        except Exception as exc:
            traj.error = _error_text(exc)
            traj.metrics = end_metrics(failed_end(exc))  # a failed episode still says why it ended
            if isinstance(exc, EnvCallError) and not isinstance(exc, AgentFailed):
                self.env = None  # it may be broken (after AgentFailed the env is fine: keep it)
        return traj

    async def _env_call(self, fn: Callable[..., Any], what: str) -> Any:
        state = None if self.env is not None and declares_own_random_state(self.env) else self.random_state
        return await self.calls.run(fn, what=f"env {self.tag!r} {what}", random_state=state)

    async def _play(self, traj: Trajectory, job: EpisodeJob, policy: PolicyClient) -> None:
        if self.env is None:
            self.random_state.reseed(DEFAULT_SEED)
            self.env = await self._env_call(self._make_env, "constructor")
        self.random_state.reseed(job.seed)
        obs, _ = await self._env_call(functools.partial(self.env.reset, seed=job.seed), "reset")
        steps = TaskEnvSteps(self.env, self._env_call)
        if job.sampling.demonstrate:
            if self.config.demonstration_tool is None:
                raise AgentFailed(
                    "env_failed",
                    f"demonstration_steps: openai_agent tag {self.tag!r} names no env_config.demonstration_tool,"
                    " the tool call a demonstrated action is written as",
                )
            policy = Demonstrator(
                steps, self.config.demonstration_tool, self.proxy.tokenizer, self.proxy.tokenizer_lock
            )
        session = AgentSession(
            policy,
            asyncio.get_running_loop(),
            job.sampling,
            self.max_calls,
            self.max_context_tokens,
            lambda i: sample_key(job.seed, *job.key_fields, i),
            step_env=steps.step,
        )
        base_url = self.proxy.open(session)
        task = {
            "prompt": obs,
            "instruction": getattr(self.env, "instruction", ""),
            "actions": list(getattr(self.env, "valid_actions", None) or []),
            "seed": job.seed,
            "tag": self.tag,
            "step_url": f"{base_url}/env/step",
        }
        try:
            outcome = await self._run_agent(base_url, task)
        finally:
            self.proxy.close_session(base_url)
        await self._score(traj, session, steps, outcome)

    async def _score(
        self, traj: Trajectory, session: AgentSession, steps: TaskEnvSteps, outcome: Any
    ) -> None:
        """`traj`'s turns, reward and success from the episode's calls and what the agent returned."""
        recorded = session.ordered_calls()
        if steps.error is not None:
            raise steps.error
        if session.policy_error is not None:
            raise RolloutError(f"a chat.completions call of the agent failed: {session.policy_error}")
        refusal = f" after the proxy answered {session.rejected}" if session.rejected else ""
        if isinstance(outcome, BaseException) and session.refused is None:
            raise AgentFailed(
                "proxy_refused" if refusal else "agent_raised",
                f"agent {self.config.agent!r} raised {type(outcome).__name__}: {outcome}{refusal}",
            ) from outcome
        if not recorded:
            raise AgentFailed(
                "proxy_refused" if refusal else "no_call",
                f"agent {self.config.agent!r} made no chat.completions call through its base_url{refusal}; "
                "nothing to train on (the agent must send its requests to the base_url it is given)",
            )
        if session.refused:
            reward, success, end = 0.0, False, "truncated"
        elif steps.steps or outcome is None:
            reward, success = self._stepped_outcome(outcome, steps)
            end = "done" if steps.done else stopped_end(recorded)
        else:
            (reward, success), end = await self._outcome(outcome), "answered"
        traj.turns, chained = calls_to_turns(recorded, reward, self.tag)
        traj.success, traj.terminated, traj.truncated = (
            success,
            session.refused is None,
            session.refused is not None,
        )
        traj.metrics = {
            **manager_metrics(traj.turns, traj.success),
            UNCHAINED_METRIC: float(not chained),
            **end_metrics(end, recorded),
        }

    async def _run_agent(self, base_url: str, task: dict[str, Any]) -> Any:
        """The agent's return value, or the exception it raised; `AgentTimeout` after `agent_timeout_s`."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def run() -> None:
            try:
                value: Any = self.agent(base_url, dict(task))
            except BaseException as exc:  # the agent's failure is the episode's, never the worker's
                value = exc
            with contextlib.suppress(RuntimeError):  # the worker closed its loop while the agent ran on
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(value))

        threading.Thread(target=run, name=f"agent-{self.tag}", daemon=True).start()
        try:
            async with asyncio.timeout(self.config.agent_timeout_s):
                return await asyncio.shield(done)
        except TimeoutError:
            raise AgentTimeout(
                f"agent {self.config.agent!r} did not return within agent_timeout_s={self.config.agent_timeout_s:g} s"
            ) from None

    def _stepped_outcome(self, outcome: Any, steps: TaskEnvSteps) -> tuple[float, bool]:
        """(reward, success) of an episode whose agent stepped the task env: the steps' (module docstring)."""
        if outcome is not None:
            raise AgentFailed(
                "bad_outcome",
                f"agent {self.config.agent!r} stepped the task env through step_url and returned"
                f" {type(outcome).__name__} {outcome!r:.60}: the env's steps give the episode's reward, so an"
                " agent that steps it returns None",
            )
        return steps.reward, steps.success

    async def _outcome(self, outcome: Any) -> tuple[float, bool]:
        """(reward, success) of what the agent returned (see the module docstring)."""
        if isinstance(outcome, bool) or not isinstance(outcome, int | float | str | Mapping):
            raise AgentFailed(
                "bad_outcome",
                f"agent {self.config.agent!r} returned {type(outcome).__name__}; return a number (the reward), "
                "a string (the answer the task env checks), a dict with 'reward' or 'answer', or None after stepping the task "
                "env through step_url",
            )
        if isinstance(outcome, Mapping) and "reward" in outcome:
            reward = finite_reward(outcome["reward"], f"{self.config.agent} gave", bad_outcome)
            return reward, bool(outcome.get("success", reward > 0))
        if isinstance(outcome, int | float):
            reward = finite_reward(outcome, f"{self.config.agent} gave", bad_outcome)
            return reward, reward > 0
        answer = outcome.get("answer") if isinstance(outcome, Mapping) else outcome
        if not isinstance(answer, str):
            raise AgentFailed(
                "bad_outcome",
                f"agent {self.config.agent!r} returned an answer of type {type(answer).__name__}",
            )
        fmt, actions = (
            getattr(self.env, "format_answer", None),
            getattr(self.env, "valid_actions", None) or (),
        )
        action = fmt(answer) if callable(fmt) and answer in actions else answer
        _, reward, _, _, info = await self._env_call(functools.partial(self.env.step, action), "step")
        return finite_reward(reward, "the task env gave", bad_outcome), bool(
            (info or {}).get("success", False)
        )

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            close_quietly(env)


def bad_outcome(message: str) -> AgentFailed:
    """The error of an outcome that is no finite reward (`finite_reward`'s `error`)."""
    return AgentFailed("bad_outcome", message)


def _error_text(exc: Exception) -> str:
    """`Trajectory.error` of an episode that failed with `exc`: its failure kind, then what happened."""
    if isinstance(exc, EnvCallTimeout):
        return f"env_timeout: {exc}"
    if isinstance(exc, EnvCallError):
        return f"env_error: {exc}"
    return f"policy_error: {type(exc).__name__}: {exc}"
