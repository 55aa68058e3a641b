"""Colocation of actor_infer: which roles share its GPUs, and whether its vLLM engine sleeps while they run.

Two roles are colocated when their `device_mapping`s name a GPU in common. A vllm actor_infer colocated with
a role the pipeline runs (actor_train, critic, a reference worker of its own) sleeps at its strategy_config
`sleep_level` (default 1) from the end of each rollout until the weight sync that precedes the next one
(`roll_pipeline.runtime.infer_sleep`): the trainer then has the GPU memory the engine held. On the CPU
(empty `device_mapping`s) nothing is colocated and nothing sleeps: vLLM's CPU build has no sleep mode.

`offloaded_roles`: the trained roles colocated with actor_infer (any inference backend: its memory is in use
while it samples) whose `offload_when_colocated` is on; the pipeline moves their state to CPU memory while the
engine samples (`roll_pipeline.runtime.trainer_offload`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from roll_strategies.infer.sleep import DEFAULT_SLEEP_LEVEL, SLEEP_LEVELS

from roll_pipeline.config.roles import WorkerConfig

__all__ = [
    "InferSleep",
    "colocated_with_infer",
    "infer_sleep",
    "offloaded_roles",
    "sleep_level_of",
]


@dataclass(frozen=True)
class InferSleep:
    """Whether and how actor_infer's engine sleeps during the training phase of a step."""

    level: int
    """The vllm `sleep_level` (0 for a backend that never sleeps)."""
    shared_with: tuple[str, ...]
    """The roles run on a GPU of actor_infer's."""

    @property
    def enabled(self) -> bool:
        """Whether the engine is put to sleep: it shares GPUs and its level is above 0."""
        return self.level > 0 and bool(self.shared_with)


def sleep_level_of(role: WorkerConfig) -> object:
    """The `sleep_level` in a vllm role's strategy_config (its default when absent); unchecked (see
    `config.checks`)."""
    return role.strategy_args.strategy_config.get("sleep_level", DEFAULT_SLEEP_LEVEL)


def infer_sleep(roles: Mapping[str, WorkerConfig], names: Sequence[str]) -> InferSleep:
    """How actor_infer sleeps, given the role configs and the names of the roles the run spawns."""
    infer = roles["actor_infer"]
    level = sleep_level_of(infer)
    if infer.strategy_args.strategy_name != "vllm" or not isinstance(level, int) or level not in SLEEP_LEVELS:
        return InferSleep(0, ())
    return InferSleep(level, colocated_with_infer(roles, names))


def colocated_with_infer(roles: Mapping[str, WorkerConfig], names: Sequence[str]) -> tuple[str, ...]:
    """The roles of `names` (other than actor_infer) whose `device_mapping` names a GPU of actor_infer's."""
    gpus = set(roles["actor_infer"].device_mapping)
    return tuple(n for n in names if n != "actor_infer" and gpus & set(roles[n].device_mapping))


def offloaded_roles(roles: Mapping[str, WorkerConfig], names: Sequence[str]) -> tuple[str, ...]:
    """The roles whose trainer state moves to CPU memory while actor_infer samples: those colocated with it
    (`colocated_with_infer`) with `offload_when_colocated` on."""
    return tuple(n for n in colocated_with_infer(roles, names) if roles[n].offload_when_colocated)
