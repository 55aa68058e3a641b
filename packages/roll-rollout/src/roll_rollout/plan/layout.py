"""`EnvLayout`: which env slots form which group, with which tag, on which worker.

A group has `group_size + group_size_redundancy` env slots; they play the same seed, and the group's
episode is complete when the first `group_size` of them finish. Tags own consecutive groups, in the
proportions of `num_groups_partition`. `envs_per_worker` resolves the default worker size.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from roll_rollout.errors import SchedulerError

DEFAULT_ENVS_PER_WORKER = 64
"""Envs per env worker when the machine has a CPU for each such worker."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def envs_per_worker(num_envs: int, requested: int | None, cpus: int | None = None) -> int:
    """The envs one worker hosts: `requested`, or (None) 64 but no more workers than `cpus` (default:
    `usable_cpus()`). Env workers beyond the cores only compete for them: P1 on 2 cores, 256 FrozenLake envs
    under Ray, reached 0.45 of the in-process loop with 4 workers of 64 and 0.58-0.64 with 2 of 128."""
    if requested is not None:
        return requested
    workers = min(-(-num_envs // DEFAULT_ENVS_PER_WORKER), cpus or usable_cpus())
    return max(1, -(-num_envs // max(1, workers)))


@dataclass(frozen=True)
class EnvLayout:
    """Which group, tag and worker each env slot belongs to."""

    num_env_groups: int
    group_size: int
    tags: tuple[str, ...]
    num_groups_partition: tuple[int, ...]
    max_env_num_per_worker: int
    group_size_redundancy: int = 0

    def __post_init__(self) -> None:
        if len(self.tags) != len(self.num_groups_partition):
            raise SchedulerError(
                f"tags {list(self.tags)} and num_groups_partition {list(self.num_groups_partition)} "
                "must have the same length (one group count per tag)"
            )
        if sum(self.num_groups_partition) != self.num_env_groups:
            raise SchedulerError(
                f"num_groups_partition {list(self.num_groups_partition)} sums to "
                f"{sum(self.num_groups_partition)}, but num_env_groups is {self.num_env_groups}: make them agree"
            )
        if self.group_size < 1 or self.max_env_num_per_worker < 1 or self.group_size_redundancy < 0:
            raise SchedulerError(
                "group_size and max_env_num_per_worker must be >= 1 and group_size_redundancy >= 0, got "
                f"{self.group_size}, {self.max_env_num_per_worker}, {self.group_size_redundancy}"
            )
        if len(set(self.tags)) != len(self.tags):
            raise SchedulerError(f"tags {list(self.tags)} repeat a tag; list each tag once")

    @property
    def slots_per_group(self) -> int:
        """Env slots of one group: group_size + group_size_redundancy."""
        return self.group_size + self.group_size_redundancy

    @property
    def num_envs(self) -> int:
        """All env slots."""
        return self.num_env_groups * self.slots_per_group

    @property
    def num_workers(self) -> int:
        """Workers needed to host every slot."""
        return -(-self.num_envs // self.max_env_num_per_worker)

    def tag_of_group(self, group: int) -> str:
        """The tag whose share of groups contains `group`."""
        end = 0
        for tag, count in zip(self.tags, self.num_groups_partition, strict=True):
            end += count
            if group < end:
                return tag
        raise SchedulerError(f"group {group} is out of range (num_env_groups={self.num_env_groups})")

    def groups_of_tag(self, tag: str) -> range:
        """The layout groups of `tag`."""
        start = 0
        for name, count in zip(self.tags, self.num_groups_partition, strict=True):
            if name == tag:
                return range(start, start + count)
            start += count
        raise SchedulerError(f"unknown tag {tag!r}; the layout's tags are {list(self.tags)}")

    def env_ids_of_group(self, group: int) -> range:
        """The env slots of `group`."""
        return range(group * self.slots_per_group, (group + 1) * self.slots_per_group)

    def group_of_env(self, env_id: int) -> int:
        """The layout group of an env slot."""
        return env_id // self.slots_per_group

    def worker_of_env(self, env_id: int) -> int:
        """Index of the worker hosting `env_id`."""
        return env_id // self.max_env_num_per_worker

    def env_ids_of_worker(self, worker: int) -> range:
        """The env slots hosted by `worker`."""
        start = worker * self.max_env_num_per_worker
        return range(start, min(start + self.max_env_num_per_worker, self.num_envs))


class TagMix:
    """Splits each batch's groups among tags in the proportions of `num_groups_partition`.

    Every batch gives each tag the floor or the ceiling of its exact share, and the running totals stay
    within one group of the exact shares (largest deficit first), so a batch smaller than all groups
    still serves every tag over time — not only the first one.
    """

    def __init__(self, partition: Mapping[str, int]) -> None:
        total = sum(partition.values())
        self._weights = {tag: count / total for tag, count in partition.items() if count > 0}
        self._given = dict.fromkeys(self._weights, 0)
        self._asked = 0

    def split(self, num_groups: int) -> dict[str, int]:
        """Groups per tag for the next batch of `num_groups` groups."""
        share = {tag: num_groups * w for tag, w in self._weights.items()}
        out = {tag: math.floor(s) for tag, s in share.items()}
        target = {tag: (self._asked + num_groups) * w for tag, w in self._weights.items()}
        rest = num_groups - sum(out.values())
        # hand the remainder to the tags furthest behind their running target (ties: partition order)
        fractional = [t for t in self._weights if share[t] - out[t] > 1e-9]
        order = sorted(fractional, key=lambda t: -(target[t] - self._given[t] - out[t]))
        for tag in order[:rest]:
            out[tag] += 1
        self._asked += num_groups
        for tag, count in out.items():
            self._given[tag] += count
        return out

    def state(self) -> dict[str, int]:
        """Groups handed to each tag so far (for checkpoints)."""
        return {**self._given, "__asked__": self._asked}

    def set_state(self, state: Mapping[str, int]) -> None:
        """Restore what `state` returned."""
        self._asked = int(state["__asked__"])
        self._given = {tag: int(state.get(tag, 0)) for tag in self._weights}
