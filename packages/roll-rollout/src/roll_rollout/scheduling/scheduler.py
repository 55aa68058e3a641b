"""`RolloutScheduler`: env-granular asynchronous rollout with bounded staleness.

Every env slot runs its own loop on its worker (`EnvWorker`); the scheduler, on the driver's event
loop, hands each layout group its next *group episode* (a seed that all its slots play), collects
finished episodes as they stream in, and queues a group as soon as `group_size` of its episodes
finished healthy (redundant slots' stragglers are cancelled). `get_batch(n)` takes whole groups from
that queue, oldest first, in the tag mix of `num_groups_partition`.

Modes (`async_generation_ratio` r):
- r = 0, synchronous: group episodes start only for a pending `get_batch`; when it returns nothing
  runs, so every trained turn comes from the weights of the current policy version.
- r > 0: group episodes keep starting while the trainer trains, up to (1 + r) batches queued or in
  flight; at `get_batch` a group holding a turn older than `policy_version - r` is dropped as stale.

Faults: a failed episode (env error, env timeout, policy error) is never trained on; its slot replays
the same group episode (same seed) with a fresh env (in training, unless a backup of it still runs: that
takes its place), and a group episode with more than `max_failures_per_group` failures is given up (its
healthy episodes counted as dropped) and the layout group moves on to a new seed. A worker that dies, or whose hung env calls need a new process, is
killed and respawned, and its running episodes are replayed. See docs/rollout.md.

Backups of episodes whose env call runs slow, and which attempt at a place trains: roll_rollout.scheduling.backups.

Helpers: `SeedStream` (seeds.py: what checkpoints save), `Demand` (what the refill aims at), `GroupQueue`,
`WorkerPool`, `RolloutMetrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from roll_rollout.errors import SchedulerError
from roll_rollout.hosting.env_manager import EpisodeJob, failure_kind
from roll_rollout.hosting.heap import freeze_startup_heap
from roll_rollout.hosting.players import split_group
from roll_rollout.plan.layout import EnvLayout
from roll_rollout.plan.seeds import SeedStream
from roll_rollout.policies.policy import SamplingSettings
from roll_rollout.scheduling import backups
from roll_rollout.scheduling.backups import Attempts
from roll_rollout.scheduling.demand import Demand
from roll_rollout.scheduling.group_queue import GroupQueue
from roll_rollout.scheduling.groups import GroupEpisode, GroupFilter, Ledger, RolloutBatch, SpawnWorker
from roll_rollout.scheduling.pool import WorkerPool
from roll_rollout.scheduling.rollout_metrics import RolloutMetrics
from roll_rollout.scheduling.settings import SchedulerSettings
from roll_rollout.schema import Trajectory


class RolloutScheduler:
    """Keeps the env slots of a layout busy and hands out whole groups of trajectories."""

    def __init__(
        self,
        layout: EnvLayout,
        spawn_worker: SpawnWorker,
        sampling_by_tag: dict[str, SamplingSettings],
        *,
        seed: int = 0,
        settings: SchedulerSettings | None = None,
        group_filter: GroupFilter | None = None,
    ) -> None:
        missing = sorted(set(layout.tags) - set(sampling_by_tag))
        if missing:
            raise SchedulerError(f"no sampling settings for tags {missing}")
        self.layout = layout
        self.settings = settings or SchedulerSettings()
        if self.settings.filter_keep_fraction < 1 and group_filter is None:
            raise SchedulerError("filter_keep_fraction < 1 needs a group_filter")
        self.sampling_by_tag = dict(sampling_by_tag)
        self.policy_version = 0
        self.ledger = Ledger()
        self.dispatched = 0
        self._seeds = SeedStream(layout, seed)
        self._metrics = RolloutMetrics()
        self._pool = WorkerPool(
            layout.num_workers,
            spawn_worker,
            self._on_results,
            self._on_replaced,
            self._on_pool_error,
            self.settings.poll_wait_s,
        )
        self._busy: dict[int, GroupEpisode] = {}  # layout group -> its running group episode
        self._owner: dict[int, GroupEpisode] = {}  # running episode id -> its group episode
        self._backup_ids = itertools.count(backups.BACKUP_EPISODE_IDS)
        self._ready = GroupQueue(layout.tags, self.ledger, self._metrics.count, group_filter)
        self._demand = Demand(layout.tags, layout.group_size, self.settings)
        self._consecutive_given_up = 0
        self._fatal: SchedulerError | None = None
        self._changed: asyncio.Event | None = None
        self._started = False

    # ------------------------------------------------------------------ seeds and state
    def next_seeds(self, num_groups: int) -> list[int]:
        """Fresh training seeds, one per group (below 2**31, disjoint from `validation_seeds`)."""
        return self._seeds.training_seeds(num_groups)

    def rng_state(self) -> dict[str, Any]:
        """For checkpoints, JSON-friendly: the seed stream, id counters, tag mix and round-robin cursors, with
        which a restored scheduler plays the same seeds on the same env slots under the same episode ids."""
        return self._seeds.state()

    def set_rng_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `rng_state` returned; anything else raises `SchedulerError` and changes nothing."""
        self._seeds.set_state(state)

    def set_sampling(self, sampling_by_tag: dict[str, SamplingSettings]) -> None:
        """Sample the group episodes started from now on this way (a temperature schedule); one already
        running keeps the settings it started with, its replays and backups too, so every turn of a group
        samples alike."""
        if set(sampling_by_tag) != set(self.layout.tags):
            raise SchedulerError(
                f"set_sampling needs settings for exactly the tags {sorted(self.layout.tags)},"
                f" got {sorted(sampling_by_tag)}"
            )
        self.sampling_by_tag = dict(sampling_by_tag)

    def set_policy_version(self, version: int) -> None:
        """The version of the weights the policy now samples with (staleness is measured against it)."""
        self.policy_version = int(version)

    # ------------------------------------------------------------------ get_batch
    async def get_batch(self, num_trajectories: int, seeds: Sequence[int] | None = None) -> RolloutBatch:
        """Exactly `num_trajectories` trajectories of whole complete groups, oldest first.

        `seeds` (synchronous mode only) plays these seeds, one group episode each, instead of drawing
        fresh ones: validation. A seed whose episodes keep failing is given up, so that batch is
        short by its group and the failures are in `RolloutBatch.failed`.
        """
        need = self._demand.plan(num_trajectories, self._seeds.mix, seeds)
        self._start()
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.batch_timeout_s
        while True:
            if self._fatal is not None:
                raise self._fatal
            self._ready.drop_stale(self.policy_version - self.settings.async_generation_ratio)
            if self._demand.satisfied(need, seeds is not None, self._ready.size, self._running_of_tag):
                break
            self._refill()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise SchedulerError(self._timeout_message(num_trajectories, need))
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 1.0)):
                    await self._changed.wait()
        batch = self._take(need, explicit=seeds is not None)
        self._demand.taken()
        self._refill()
        return batch

    def _take(self, need: dict[str, int], explicit: bool) -> RolloutBatch:
        taken = [
            ge
            for tag, n in need.items()
            for ge in self._ready.take(
                tag, self._demand.collect_count(tag, n, explicit), n if not explicit else 1 << 62
            )
        ]
        episodes = [sorted(ge.finished, key=lambda t: t.env_id) for ge in taken]
        self.ledger.add("delivered", sum(len(e) for e in episodes))
        trajs = [t for group in episodes for t in split_group(group, self._seeds.new_group_key)]
        failed, queued = self._metrics.take_failed(), sum(self._ready.sizes().values())
        metrics = self._metrics.take(self.ledger, trajs, self.policy_version, queued, len(self._running()))
        return RolloutBatch(trajs, failed, metrics)

    # ------------------------------------------------------------------ dispatch
    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._changed = asyncio.Event()
        self._pool.start()
        freeze_startup_heap()  # the workers are built: full GC passes skip the start-up heap from now on

    def _running(self) -> list[GroupEpisode]:
        """The running group episodes, once each (a backup's lent layout group maps to its owner too)."""
        return list({id(ge): ge for ge in self._busy.values()}.values())

    def _running_of_tag(self, tag: str) -> int:
        return sum(1 for ge in self._running() if ge.tag == tag)

    def _refill(self) -> None:
        """Start group episodes on idle layout groups: the queued explicit seeds, then fresh seeds
        until each tag has the groups it wants (`Demand.want`) queued or running."""
        for tag in self.layout.tags:
            queue = self._demand.seeds[tag]
            have = self._ready.size(tag) + self._running_of_tag(tag)
            while queue or have < self._demand.want[tag]:
                group = self._seeds.idle_group(tag, self._busy)
                if group is None:
                    break
                if queue:
                    self._start_group(group, tag, queue.popleft(), explicit=True)
                else:
                    self._start_group(group, tag, self.next_seeds(1)[0], explicit=False)
                have += 1

    def _start_group(self, group: int, tag: str, seed: int, explicit: bool) -> None:
        key, sampling = self._seeds.new_group_key(), self.sampling_by_tag[tag]
        ge = GroupEpisode(key, group, tag, seed, explicit, sampling, self.policy_version)
        self._busy[group] = ge
        self._dispatch([(ge, env_id, Attempts()) for env_id in self.layout.env_ids_of_group(group)])

    def _dispatch(self, slots: Sequence[tuple[GroupEpisode, int, Attempts]], backup: bool = False) -> None:
        """One episode of each group episode on its env slot, as the next attempt at its place; a backup's id
        comes from a stream of its own, so the ids (sampling keys) of the rest never depend on call times, and
        it samples with the keys of the attempt it replicates (roll_rollout.scheduling.backups)."""
        by_worker: dict[int, list[EpisodeJob]] = {}
        for ge, env_id, attempts in slots:
            episode_id = next(self._backup_ids) if backup else self._seeds.new_episode_id()
            if not backup:
                attempts.key = (env_id, episode_id)
            job = EpisodeJob(env_id, ge.key, episode_id, ge.seed, ge.sampling, attempts.key)
            self.dispatched += 1
            ge.running[episode_id] = env_id
            ge.attempts[episode_id] = attempts
            attempts.order.append(episode_id)
            self._owner[episode_id] = ge
            by_worker.setdefault(self.layout.worker_of_env(env_id), []).append(job)
        for w, jobs in by_worker.items():
            self._pool.submit(w, jobs)

    # ------------------------------------------------------------------ collection
    def _on_results(
        self, w: int, done: list[Trajectory], cancelled: list[int], stats: dict[str, Any]
    ) -> None:
        for episode_id in cancelled:
            self._on_cancelled(w, episode_id)
        for traj in done:
            self._on_finished(w, traj)
        self._metrics.note_stats(w, stats)
        backups.note_prefixes(stats.get("slow_prefixes") or (), self._owner)
        self._back_up(stats.get("slow_episodes") or ())

    def _back_up(self, slow: Sequence[int]) -> None:
        """Play the backups of the slow episodes that get one now (roll_rollout.scheduling.backups)."""
        for ge, episode_id, env_id in backups.plan_backups(slow, self._owner, self._busy, self.layout):
            self._metrics.count("rollout/backup_episodes")
            self._dispatch([(ge, env_id, ge.attempts[episode_id])], backup=True)

    def _on_cancelled(self, w: int, episode_id: int) -> None:
        ge = self._owner.pop(episode_id, None)
        if ge is None:
            return
        ge.running.pop(episode_id, None)
        self.ledger.add("cancelled")

    def _on_finished(self, w: int, traj: Trajectory) -> None:
        ge = self._owner.pop(traj.episode_id, None)
        if ge is None or traj.group_id != ge.key:
            self._fatal = SchedulerError(
                f"worker {w} returned episode {traj.episode_id} of group {traj.group_id}, which is not running"
            )
            self._notify()
            return
        ge.running.pop(traj.episode_id, None)
        kind = failure_kind(traj)
        if kind is not None:
            self.ledger.add("failed")
            self._metrics.note_failure(traj, kind)
        attempts = ge.attempts.get(traj.episode_id)
        if ge.closed or attempts is None:  # its group, or its place, is settled
            if kind is None:
                self.ledger.add("straggler")
            return
        if kind is not None:
            ge.failures += 1
            if ge.failures > self.settings.max_failures_per_group:
                self._give_up(ge)
                return
        self._ended(ge, attempts, traj.episode_id, traj.env_id, traj if kind is None else None)

    def _ended(
        self, ge: GroupEpisode, attempts: Attempts, episode_id: int, env_id: int, traj: Trajectory | None
    ) -> None:
        """An attempt at a place of open `ge` ended on `env_id`: replay the place, or keep the trajectory it
        trains (the keep and race rules: roll_rollout.scheduling.backups.settle)."""
        step = backups.settle(ge, attempts, episode_id, traj, self.settings, self._metrics.note_replica)
        if step.replay:
            self._dispatch([(ge, env_id, attempts)])
        elif step.kept is not None:
            # backups that ended healthy before the attempt kept did
            self.ledger.add("straggler", step.stragglers)
            self._cancel(ge, step.cancel)
            self._keep(ge, step.kept)

    def _keep(self, ge: GroupEpisode, traj: Trajectory) -> None:
        ge.finished.append(traj)
        if len(ge.finished) == self.layout.group_size:
            self._complete(ge)

    def _complete(self, ge: GroupEpisode) -> None:
        self._close(ge)
        self._consecutive_given_up = 0
        self._ready.push(ge)
        self._notify()
        self._refill()

    def _give_up(self, ge: GroupEpisode) -> None:
        self._close(ge)
        self.ledger.add("dropped_incomplete", len(ge.finished))
        self._metrics.count("rollout/given_up_groups")
        if ge.explicit_seed:
            self._demand.given_up[ge.tag] += 1
        self._consecutive_given_up += 1
        if self._consecutive_given_up >= self.settings.max_consecutive_given_up:
            self._fatal = SchedulerError(
                f"every env seems to be failing: {self._consecutive_given_up} group episodes in a row were "
                f"given up after more than max_failures_per_group={self.settings.max_failures_per_group} "
                f"failed episodes each. Last error: {self._metrics.last_failure[:2000]}"
            )
        self._notify()
        self._refill()

    def _close(self, ge: GroupEpisode) -> None:
        """Mark `ge` done, free its layout group, cancel its still running episodes."""
        ge.closed = True
        for group in (ge.layout_group, *ge.borrowed):
            if self._busy.get(group) is ge:
                del self._busy[group]
        self._cancel(ge, list(ge.running))

    def _cancel(self, ge: GroupEpisode, episode_ids: Sequence[int]) -> None:
        """Cancel these running episodes of `ge` (their workers acknowledge it)."""
        by_worker: dict[int, list[int]] = {}
        for episode_id in episode_ids:
            by_worker.setdefault(self.layout.worker_of_env(ge.running[episode_id]), []).append(episode_id)
        for w, ids in by_worker.items():
            self._pool.cancel(w, ids)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _on_pool_error(self, w: int, exc: BaseException) -> None:
        self._fatal = SchedulerError(
            f"internal error while handling the results of env worker {w}: {type(exc).__name__}: {exc}"
        )
        self._fatal.__cause__ = exc
        self._notify()

    # ------------------------------------------------------------------ worker restarts
    def _on_replaced(self, w: int, lost: list[int], reason: str, recycle: bool) -> None:
        """Worker `w` was replaced: count its episodes as lost and replay those of open groups."""
        self._metrics.count("rollout/env_worker_recycles" if recycle else "rollout/env_worker_restarts")
        if self._pool.restarts > self.settings.max_worker_restarts:
            self._fatal = SchedulerError(
                f"env workers had to be restarted {self._pool.restarts} times, more than max_worker_restarts="
                f"{self.settings.max_worker_restarts} (last: worker {w}, {reason})"
            )
            self._notify()
            return
        for episode_id in lost:
            ge = self._owner.pop(episode_id, None)
            if ge is None:
                continue
            env_id = ge.running.pop(episode_id)
            self.ledger.add("lost")
            attempts = ge.attempts.get(episode_id)
            if not ge.closed and attempts is not None:
                self._ended(ge, attempts, episode_id, env_id, None)

    # ------------------------------------------------------------------ stop
    async def stop(self) -> None:
        """Cancel everything running, stop polling and kill the workers; the ledger closes its books."""
        self._started = False
        await self._pool.stop()
        self.ledger.add("cancelled", len(self._owner))
        self._owner.clear()
        for ge in self._running():  # finished episodes of group episodes left incomplete
            self.ledger.add("unconsumed", len(ge.finished))
        self._busy.clear()
        self._ready.drain()

    def _timeout_message(self, num_trajectories: int, need: dict[str, int]) -> str:
        ready = self._ready.sizes()
        failed = self.ledger.total["failed"]
        return (
            f"get_batch({num_trajectories}) got no batch within batch_timeout_s={self.settings.batch_timeout_s:g} s: "
            f"groups needed per tag {need}, ready {ready}, running {len(self._running())}; {failed} episodes failed so "
            f"far (last error: {self._metrics.last_failure[:500] or 'none'}). Check the env and the policy server, or raise "
            "rollout_batch_timeout_s if episodes are just slow."
        )
