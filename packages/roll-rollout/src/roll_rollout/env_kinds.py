"""The kinds of `env_type` a tag can name, in one table: what plays a slot's episodes, which roll env they are
played on (the config check), and what `roll config` loads before a run (the preflight check).

- a roll env (any registered `env_type`, the default): the policy plays it turn by turn (`TrajEnvManager`);
- `openai_agent`: an OpenAI-client agent plays each episode through the training proxy (`AgentEnvManager`,
  `roll_rollout.agent_manager`) on the tasks of the roll env its `env_config.task_env` names.

Code elsewhere asks `env_kind(env_type)`, never compares an env type's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from roll_rollout.agent_manager import AGENT_ENV_TYPE, AgentConfig, AgentEnvManager, load_agent
from roll_rollout.env_manager import TrajEnvManager

__all__ = ["ENV_KINDS", "ROLL_ENV", "EnvKind", "env_kind"]


@dataclass(frozen=True)
class EnvKind:
    """How roll hosts and checks the tags of one kind of env type."""

    manager: type[TrajEnvManager] | type[AgentEnvManager]
    """The class that plays a slot's episodes (`EnvWorker` builds one per slot)."""
    played_env: Callable[[str, Any], tuple[str, Any]]
    """The config check: (env_type, env_config) of a tag -> the roll env its episodes are played on and that
    env's config (a roll env: the tag's own, unchecked here); raises the kind's `RolloutError`, whose message
    says the fix."""
    preflight: Callable[[Any], None]
    """What `roll config` loads of a tag's env_config before a run (raises the kind's `RolloutError`)."""
    played_at: str
    """Where the played env's type and config sit in the tag: "." (its own env_type / env_config), or the
    prefix of the fields naming it ("." + "env_config.task_": task_env / task_env_config)."""
    agent_plays: bool
    """An agent program plays the episodes, not the policy turn by turn: it keeps its own history, nothing
    demonstrates, and the tag has no env of its own to score baselines on."""


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
