"""`Demand`: what the `RolloutScheduler` plays toward: a batch's groups per tag (in the tag mix), the group
episodes to keep queued or running for it (`want`), the explicit seeds still to start (validation) and how
many of them were given up, and how many complete groups a batch takes from the queue (more than it needs
when the StarPO-S filter is on)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from roll_rollout.errors import SchedulerError
from roll_rollout.plan.layout import TagMix
from roll_rollout.scheduling.settings import SchedulerSettings


class Demand:
    """The per-tag targets of the refill; `plan` sets them for each `get_batch`."""

    def __init__(self, tags: Sequence[str], group_size: int, settings: SchedulerSettings) -> None:
        self.tags, self.group_size, self.settings = tuple(tags), group_size, settings
        self.want: dict[str, int] = dict.fromkeys(self.tags, 0)
        self.seeds: dict[str, deque[int]] = {tag: deque() for tag in self.tags}
        self.given_up: dict[str, int] = dict.fromkeys(self.tags, 0)

    def plan(self, num_trajectories: int, mix: TagMix, seeds: Sequence[int] | None) -> dict[str, int]:
        """The groups per tag of a batch of `num_trajectories` (in `mix`), at which this aims the refill: the
        explicit `seeds` (synchronous mode only, one group each, in tag order), or enough fresh group episodes
        for the filter and, in async mode, r batches ahead."""
        size = self.group_size
        if num_trajectories <= 0 or num_trajectories % size:
            raise SchedulerError(
                f"get_batch({num_trajectories}): the batch must be whole groups, a positive multiple of "
                f"group_size={size}"
            )
        need = mix.split(num_trajectories // size)
        ratio = self.settings.async_generation_ratio
        if seeds is None:
            keep = self.settings.filter_keep_fraction
            self.want = {tag: math.ceil((1 + ratio) * n / keep - 1e-9) for tag, n in need.items()}
            return need
        if ratio > 0:
            raise SchedulerError("explicit seeds need the synchronous mode (async_generation_ratio=0)")
        if len(seeds) != num_trajectories // size:
            raise SchedulerError(f"got {len(seeds)} seeds for {num_trajectories // size} groups")
        it = iter(seeds)
        for tag in self.tags:
            self.seeds[tag].extend(next(it) for _ in range(need[tag]))
            self.given_up[tag] = 0
        self.want = dict.fromkeys(self.tags, 0)  # the seed queue alone says what to play
        return need

    def taken(self) -> None:
        """A batch was taken: the synchronous mode plays nothing more until the next `get_batch`."""
        if self.settings.async_generation_ratio == 0:
            self.want = dict.fromkeys(self.tags, 0)

    def collect_count(self, tag: str, need: int, explicit: bool) -> int:
        """Groups to take from the queue for `need` groups of `tag` (more when the filter is on)."""
        if explicit:
            return need - self.given_up[tag]
        return math.ceil(need / self.settings.filter_keep_fraction - 1e-9)

    def satisfied(
        self,
        need: Mapping[str, int],
        explicit: bool,
        ready: Callable[[str], int],
        running: Callable[[str], int],
    ) -> bool:
        """Whether the batch can be taken: every explicit seed played or given up, or enough groups `ready`."""
        if explicit:
            return all(not self.seeds[t] and not running(t) for t in need)
        return all(ready(t) >= self.collect_count(t, n, False) for t, n in need.items())
