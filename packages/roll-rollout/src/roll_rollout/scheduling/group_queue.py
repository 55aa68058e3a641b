"""`GroupQueue`: complete group episodes waiting for `get_batch`, per tag, oldest (first created) first.

At `get_batch` the queue drops the groups that became too stale, then hands out the oldest groups of
each tag; with the StarPO-S filter on it hands out `need` of the `need / keep_fraction` oldest, those
the filter picks (scoring a multi-player episode by each policy seat's score). Every episode it drops is booked in the ledger with its reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from roll_rollout.errors import SchedulerError
from roll_rollout.hosting.players import split_players
from roll_rollout.scheduling.groups import GroupEpisode, GroupFilter, Ledger


class GroupQueue:
    """Complete group episodes per tag, in creation order (their `key`), not completion order: which groups
    a batch takes, and their order in it, must not depend on which env finished first."""

    def __init__(
        self,
        tags: Sequence[str],
        ledger: Ledger,
        count: Callable[[str], None],
        group_filter: GroupFilter | None = None,
    ) -> None:
        self._queues: dict[str, deque[GroupEpisode]] = {tag: deque() for tag in tags}
        self._ledger = ledger
        self._count = count
        self._filter = group_filter

    def push(self, ge: GroupEpisode) -> None:
        """Queue a complete group episode behind the older ones (usually at the end)."""
        queue = self._queues[ge.tag]
        at = len(queue)
        while at and queue[at - 1].key > ge.key:
            at -= 1
        queue.insert(at, ge)

    def size(self, tag: str) -> int:
        """Groups of `tag` waiting."""
        return len(self._queues[tag])

    def sizes(self) -> dict[str, int]:
        """Groups waiting, per tag."""
        return {tag: len(q) for tag, q in self._queues.items()}

    def drop_stale(self, oldest_allowed: int) -> None:
        """Drop the groups holding a turn of a policy version below `oldest_allowed`."""
        for tag, queue in self._queues.items():
            fresh: deque[GroupEpisode] = deque()
            for ge in queue:
                oldest = ge.min_version()
                if oldest is not None and oldest < oldest_allowed:
                    self._ledger.add("stale", len(ge.finished))
                    self._count("rollout/stale_groups")
                else:
                    fresh.append(ge)
            self._queues[tag] = fresh

    def take(self, tag: str, count: int, keep: int) -> list[GroupEpisode]:
        """The `count` oldest groups of `tag` (fewer if fewer wait), `keep` of them chosen by the filter."""
        queue = self._queues[tag]
        candidates = [queue.popleft() for _ in range(min(count, len(queue)))]
        if self._filter is None or len(candidates) <= keep:
            return candidates
        scores = [[part.score for t in ge.finished for part in split_players(t)] for ge in candidates]
        chosen = sorted({int(i) for i in self._filter(scores, keep)})
        if len(chosen) != keep or not all(0 <= i < len(candidates) for i in chosen):
            raise SchedulerError(f"group_filter returned {chosen} for {len(candidates)} groups, keep={keep}")
        for i, ge in enumerate(candidates):
            if i not in chosen:
                self._ledger.add("filtered", len(ge.finished))
                self._count("rollout/filtered_groups")
        return [candidates[i] for i in chosen]

    def drain(self) -> int:
        """Empty the queue; returns how many finished episodes it held (booked as unconsumed)."""
        episodes = sum(len(ge.finished) for q in self._queues.values() for ge in q)
        self._ledger.add("unconsumed", episodes)
        for queue in self._queues.values():
            queue.clear()
        return episodes
