"""`EnvWorker`: hosts several env managers in one process and runs their episodes concurrently.

A plain class: the pipeline wraps it with `ray.remote` (one actor per `max_env_num_per_worker`
envs) or uses it in-process. Jobs come in and trajectories go out as msgpack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import msgpack

from roll_rollout.env_manager import EpisodeJob, TrajEnvManager
from roll_rollout.errors import PayloadError
from roll_rollout.policy import PolicyClient, SamplingSettings
from roll_rollout.prompts import ChatTokenizer, PromptBuilder
from roll_rollout.schema import encode_trajectory


@dataclass(frozen=True)
class EnvSlotSpec:
    """One env instance: its id, tag, registry type and config, and the episode limits."""

    env_id: int
    tag: str
    env_type: str
    env_config: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 10
    max_history_turns: int | None = 0
    max_context_tokens: int = 2048
    instruction: str | None = None  # None: the env's own `instruction`


def encode_jobs(jobs: Sequence[EpisodeJob]) -> bytes:
    """msgpack payload of a list of episode jobs."""
    return msgpack.packb([asdict(j) for j in jobs])


def decode_jobs(payload: bytes) -> list[EpisodeJob]:
    """Inverse of `encode_jobs`."""
    try:
        raw = msgpack.unpackb(payload, raw=False)
        return [EpisodeJob(**{**j, "sampling": SamplingSettings(**j["sampling"])}) for j in raw]
    except Exception as exc:
        raise PayloadError(f"episode jobs payload is malformed: {exc}") from exc


def make_registry_env(env_type: str, env_config: dict[str, Any]) -> Any:
    """Build an env through the roll-envs registry."""
    import roll_envs

    return roll_envs.make(env_type, **env_config)


class EnvWorker:
    """Owns the env managers of `slots`; `run_episodes` plays one episode per job concurrently."""

    def __init__(
        self,
        slots: Sequence[EnvSlotSpec],
        tokenizer: ChatTokenizer,
        policy: PolicyClient,
        env_factory: Callable[[str, dict[str, Any]], Any] = make_registry_env,
    ) -> None:
        self.policy = policy
        self.managers: dict[int, TrajEnvManager] = {}
        for slot in slots:
            env = env_factory(slot.env_type, dict(slot.env_config))
            instruction = env.instruction if slot.instruction is None else slot.instruction
            prompts = PromptBuilder(tokenizer, instruction, slot.max_history_turns)
            self.managers[slot.env_id] = TrajEnvManager(
                env, slot.tag, prompts, slot.max_turns, slot.max_context_tokens
            )

    async def run_episodes(self, jobs_payload: bytes) -> list[bytes]:
        """Run every job (each on its own env slot) and return the encoded trajectories."""
        jobs = decode_jobs(jobs_payload)
        unknown = sorted({j.env_id for j in jobs} - set(self.managers))
        if unknown:
            raise PayloadError(
                f"env ids {unknown} are not hosted by this worker (it has {sorted(self.managers)})"
            )
        trajs = await asyncio.gather(*(self.managers[j.env_id].run_episode(j, self.policy) for j in jobs))
        return [encode_trajectory(t) for t in trajs]

    def close(self) -> None:
        """Close every env."""
        for manager in self.managers.values():
            manager.close()
