"""`RolloutScheduler.get_batch(n)`: n trajectories made of whole env groups.

The env slots are laid out group by group: group g owns env ids [g*group_size, (g+1)*group_size),
all of which play the same episode seed in a step (the GRPO group). Tags are given to groups by
`num_groups_partition`. Slots are spread over workers, `max_env_num_per_worker` each; every worker
runs its envs' episode loops concurrently and the policy batches their requests.

This is the synchronous mode: `get_batch` returns when every requested episode has ended.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from roll_rollout.env_manager import EpisodeJob
from roll_rollout.errors import SchedulerError
from roll_rollout.policy import SamplingSettings
from roll_rollout.schema import Trajectory, decode_trajectory
from roll_rollout.worker import encode_jobs

RunEpisodes = Callable[[bytes], Awaitable[list[bytes]]]


@dataclass(frozen=True)
class EnvLayout:
    """Which group, tag and worker each env id belongs to."""

    num_env_groups: int
    group_size: int
    tags: tuple[str, ...]
    num_groups_partition: tuple[int, ...]
    max_env_num_per_worker: int

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
        if self.group_size < 1 or self.max_env_num_per_worker < 1:
            raise SchedulerError("group_size and max_env_num_per_worker must be >= 1")

    @property
    def num_envs(self) -> int:
        """All env slots."""
        return self.num_env_groups * self.group_size

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

    def env_ids_of_group(self, group: int) -> range:
        """The env slots of `group`."""
        return range(group * self.group_size, (group + 1) * self.group_size)

    def worker_of_env(self, env_id: int) -> int:
        """Index of the worker hosting `env_id`."""
        return env_id // self.max_env_num_per_worker

    def env_ids_of_worker(self, worker: int) -> range:
        """The env slots hosted by `worker`."""
        start = worker * self.max_env_num_per_worker
        return range(start, min(start + self.max_env_num_per_worker, self.num_envs))


class RolloutScheduler:
    """Hands out episodes to the workers' env slots and gathers whole groups of trajectories."""

    def __init__(
        self,
        layout: EnvLayout,
        workers: Sequence[RunEpisodes],
        sampling_by_tag: dict[str, SamplingSettings],
        seed: int = 0,
    ) -> None:
        if len(workers) != layout.num_workers:
            raise SchedulerError(f"layout needs {layout.num_workers} workers, got {len(workers)}")
        missing = sorted(set(layout.tags) - set(sampling_by_tag))
        if missing:
            raise SchedulerError(f"no sampling settings for tags {missing}")
        self.layout = layout
        self.workers = list(workers)
        self.sampling_by_tag = dict(sampling_by_tag)
        self._rng = random.Random(seed)
        self._episode_counter = 0

    def rng_state(self) -> list[int]:
        """The seed stream's state and the episode counter, JSON-friendly (for checkpoints)."""
        version, internal, _gauss = self._rng.getstate()
        return [version, *internal, self._episode_counter]

    def set_rng_state(self, state: list[int]) -> None:
        """Restore what `rng_state` returned."""
        *rng, counter = state
        self._rng.setstate((rng[0], tuple(rng[1:]), None))
        self._episode_counter = counter

    def next_seeds(self, num_groups: int) -> list[int]:
        """Fresh training seeds, one per group (below 2**31, disjoint from `validation_seeds`)."""
        return [self._rng.randrange(0, VALIDATION_SEED_BASE) for _ in range(num_groups)]

    async def get_batch(self, num_trajectories: int, seeds: Sequence[int] | None = None) -> list[Trajectory]:
        """Play `num_trajectories` episodes (whole groups) and return them ordered by env id."""
        size = self.layout.group_size
        if num_trajectories % size:
            raise SchedulerError(
                f"get_batch({num_trajectories}): the batch must be whole groups, a multiple of group_size={size}"
            )
        num_groups = num_trajectories // size
        if num_groups > self.layout.num_env_groups:
            raise SchedulerError(
                f"get_batch({num_trajectories}) needs {num_groups} groups but only "
                f"{self.layout.num_env_groups} env groups exist: raise num_env_groups or ask for fewer"
            )
        seeds = list(seeds) if seeds is not None else self.next_seeds(num_groups)
        if len(seeds) != num_groups:
            raise SchedulerError(f"got {len(seeds)} seeds for {num_groups} groups")
        jobs_by_worker: dict[int, list[EpisodeJob]] = {}
        for group, seed in enumerate(seeds):
            sampling = self.sampling_by_tag[self.layout.tag_of_group(group)]
            for env_id in self.layout.env_ids_of_group(group):
                job = EpisodeJob(env_id, group, self._episode_counter, seed, sampling)
                self._episode_counter += 1
                jobs_by_worker.setdefault(self.layout.worker_of_env(env_id), []).append(job)
        payloads = await asyncio.gather(
            *(self.workers[w](encode_jobs(jobs)) for w, jobs in sorted(jobs_by_worker.items()))
        )
        trajs = [decode_trajectory(p) for batch in payloads for p in batch]
        return sorted(trajs, key=lambda t: t.env_id)


VALIDATION_SEED_BASE = 1_000_000_000


def validation_seeds(count: int, offset: int = 0) -> list[int]:
    """Fixed held-out seeds; never produced by `RolloutScheduler.next_seeds`."""
    return [VALIDATION_SEED_BASE + offset + i for i in range(count)]
