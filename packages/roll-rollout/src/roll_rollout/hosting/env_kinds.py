"""The kinds of `env_type` in one table, so that nothing else compares an env type's name: a roll env (any
registered type, the default), which the policy plays turn by turn (`TrajEnvManager`), and `openai_agent`, whose
episodes an OpenAI-client agent plays through the training proxy (`AgentEnvManager`) on the tasks of the roll
env its `env_config.task_env` names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from roll_rollout.hosting.agent_manager import AGENT_ENV_TYPE, AgentConfig, AgentEnvManager, load_agent
from roll_rollout.hosting.env_manager import TrajEnvManager

__all__ = ["ENV_KINDS", "ROLL_ENV", "EnvKind", "env_kind"]


@dataclass(frozen=True)
class EnvKind:
    """How roll hosts and checks the tags of one kind of env type."""

    manager: type[TrajEnvManager] | type[AgentEnvManager]  # what plays a slot's episodes (one per slot)
    played_env: Callable[[str, Any], tuple[str, Any]]
    """The config check: a tag's (env_type, env_config) -> the roll env its episodes are played on, and that env's
    config; raises the kind's `RolloutError`, whose message says the fix."""
    preflight: Callable[[Any], None]  # what `roll config` loads of the env_config (raises as `played_env`)
    played_at: (
        str  # where the played env's fields sit in the tag: "." (env_type), ".env_config.task_" (task_env)
    )
    agent_plays: bool
    """An agent program plays, not the policy turn by turn: it keeps its own history, nothing demonstrates,
    and the tag has no env of its own to score baselines on."""


def _agent(env_config: Any) -> AgentConfig:
    return AgentConfig.from_env_config(env_config if isinstance(env_config, Mapping) else {})


def _task_env(env_type: str, env_config: Any) -> tuple[str, Any]:
    agent = _agent(env_config)
    return agent.task_env, dict(agent.task_env_config)


def _load_agent(env_config: Any) -> None:
    load_agent(_agent(env_config).agent)


ROLL_ENV = EnvKind(TrajEnvManager, lambda t, c: (t, c), lambda c: None, ".", agent_plays=False)
"""The kind of every env type the table does not name: a registered roll env."""

ENV_KINDS: dict[str, EnvKind] = {
    AGENT_ENV_TYPE: EnvKind(AgentEnvManager, _task_env, _load_agent, ".env_config.task_", agent_plays=True),
}
"""The env types that are not roll envs, by name."""


def env_kind(env_type: str) -> EnvKind:
    """The kind of `env_type`: its `ENV_KINDS` entry, else `ROLL_ENV`."""
    return ENV_KINDS.get(env_type, ROLL_ENV)
