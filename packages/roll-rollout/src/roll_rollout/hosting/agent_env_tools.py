"""An `openai_agent` episode's task env as the agent's tools act on it: `POST <base_url>/env/step`, and the
tool calls a demonstrated call answers with.

A multi-turn task (FrozenLake, a sandbox) is the agent's world: its tool (`move(direction)`) posts the action
to the episode's `step_url` (`{"action": "Down"}`) and gets the env's next observation back
(`{"observation", "reward", "done", "success"}`). `TaskEnvSteps` holds what those steps gave: the sum of the
rewards and the last `info["success"]` are the episode's outcome (roll_rollout.hosting.agent_manager).

With `demonstration_steps`, an episode's calls are answered by the task env instead of the policy
(`Demonstrator`): each call's reply is the env's demonstrated action (`BaseEnv.demonstration`) written as a
call of the tag's `demonstration_tool`, `<tool_call>{"name": "move", "arguments": {"direction": "Down"}}
</tool_call>` (the block the proxy reads calls from), then eos, log-probs 0 as the env manager's
demonstrated turns. The agent runs that tool as it would a sampled one, so the cloned rows are the agent's own
prompts with the expert's calls.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from roll_rollout.hosting.env_calls import EnvCallError
from roll_rollout.policies.json_http import HttpError
from roll_rollout.policies.openai_chat import tool_call_block
from roll_rollout.policies.policy import GenerateRequest, GenerateResult
from roll_rollout.prompts import ChatTokenizer

EnvCall = Callable[[Callable[..., Any], str], Awaitable[Any]]
"""How the manager calls its task env (`fn`, what for the error text): under its timeout and random state."""


@dataclass
class TaskEnvSteps:
    """What the agent's `env/step` calls did to the episode's task env (see the module docstring)."""

    env: Any
    env_call: EnvCall
    steps: int = 0
    reward: float = 0.0
    done: bool = False
    success: bool = False
    error: EnvCallError | None = None  # a failed step: the episode's error once the agent returns

    async def step(self, action: str) -> dict[str, Any]:
        """Step the env with `action` (a bare one of its `valid_actions` is written in its answer format)."""
        if self.done:
            raise HttpError(
                400, "the episode is over (the last step answered done: true); return from the agent"
            )
        fmt, actions = (
            getattr(self.env, "format_answer", None),
            getattr(self.env, "valid_actions", None) or (),
        )
        text = fmt(action) if callable(fmt) and action in actions else action
        try:
            obs, reward, terminated, truncated, info = await self.env_call(
                lambda: self.env.step(text), "step"
            )
        except EnvCallError as exc:
            self.error = exc
            raise HttpError(500, f"the task env's step failed: {exc}") from exc
        self.steps += 1
        self.reward += float(reward)
        self.done = bool(terminated or truncated)
        self.success = bool((info or {}).get("success", False))
        return {"observation": obs, "reward": float(reward), "done": self.done, "success": self.success}


def demonstration_tool(value: Any) -> tuple[str, str] | None:
    """(tool name, argument) of an `env_config.demonstration_tool` `{name, argument}`; ValueError if malformed."""
    if value is None:
        return None
    if not (
        isinstance(value, Mapping)
        and set(value) == {"name", "argument"}
        and all(isinstance(v, str) and v for v in value.values())
    ):
        raise ValueError(
            "demonstration_tool must be {name: <the agent's tool>, argument: <its parameter that takes the env's"
            f" action>}}, e.g. {{name: move, argument: direction}}; got {value!r}"
        )
    return value["name"], value["argument"]


class Demonstrator:
    """A `PolicyClient` answering each call with the task env's demonstrated action as a tool call."""

    def __init__(
        self, steps: TaskEnvSteps, tool: tuple[str, str], tokenizer: ChatTokenizer, lock: threading.Lock
    ) -> None:
        self.steps, self.tool, self.tokenizer, self.lock = steps, tool, tokenizer, lock

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        env = self.steps.env
        demonstrate = getattr(env, "demonstration", None)
        text = await self.steps.env_call(demonstrate, "demonstration") if callable(demonstrate) else None
        fmt = getattr(env, "format_answer", None)
        action = next(
            (a for a in getattr(env, "valid_actions", None) or () if callable(fmt) and fmt(a) == text), None
        )
        if action is None:
            self.steps.error = EnvCallError(
                f"the task env demonstrated {text!r:.80}, not one of its valid_actions in its answer format:"
                " demonstration_steps with an openai_agent tag needs a task env whose demonstration() is"
                " format_answer(<a valid action>) in every state the agent reaches"
            )
            raise self.steps.error
        name, argument = self.tool
        with self.lock:
            ids = list(
                self.tokenizer.encode(tool_call_block(name, {argument: action}), add_special_tokens=False)
            )
        eos = self.tokenizer.eos_token_id
        ids += [eos] if eos is not None else []
        if len(ids) > request.sampling.max_new_tokens:
            self.steps.error = EnvCallError(
                f"the demonstrated call is {len(ids)} tokens, more than the call's budget of"
                f" {request.sampling.max_new_tokens}: raise max_tokens_per_step"
            )
            raise self.steps.error
        return GenerateResult(ids, [0.0] * len(ids), "stop", policy_version=0)
