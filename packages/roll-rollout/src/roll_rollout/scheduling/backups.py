"""Backup episodes: which episodes get one, on which env slot, and which attempt at a place trains.

An env worker reports an episode whose reset or step has run past its slow-call threshold
(`EnvCalls.slow_after_s`: `max(backup_after_s, 200x the median of the worker's recent calls)`); the
scheduler then plays one more episode of that group episode (same seed, same sampling) on a free env slot
of the same tag: a finished slot of the group itself, or of a layout group nothing else needs,
which stays lent until the group episode closes. A backup that is slow in turn gets one too, up to
`BACKUPS_PER_SLOT` per episode the group needs (`plan_backups`). What a backup counts for depends on
`SchedulerSettings.race_backups`:

- training (False): a call is slow because of the action the policy chose (heavy code in a sandbox), so
  keeping the first episodes to finish would train a sample filtered by speed. An episode, its backups and
  its replays are the `Attempts` at one place of the group, and the place trains the first of them, in
  dispatch order, that did not fail: the original whenever it ends healthy, whatever its time (its backups
  are cancelled, or booked as stragglers), a backup only once the original failed (an env error, or its
  call hit `env_step_timeout_s`). A hung call so holds its group until that timeout; then its backup,
  already running or done, takes its place at once instead of a replay from the start. A place replays
  only when every attempt at it failed.
- validation (True): whichever episodes finish first complete the group and the rest are cancelled, as
  for redundant slots, so a hung call holds a pass, which needs every seed, for about the threshold
  instead of the whole `env_step_timeout_s`. Validation seeds are fixed and its scores train nothing.

A backup's episode id comes from a stream of its own (`BACKUP_EPISODE_IDS`), so how many backups call times
caused never shifts the ids, and the sampling keys, of the episodes dispatched after them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roll_rollout.schema import Trajectory

if TYPE_CHECKING:
    from roll_rollout.plan.layout import EnvLayout
    from roll_rollout.scheduling.groups import GroupEpisode

BACKUP_EPISODE_IDS = 1 << 62
"""Where backups' episode ids start: they count on from here, apart from the ids (and so the sampling keys,
`seeds.sample_key`) of the other episodes, which then never depend on how many backups timing caused."""

BACKUPS_PER_SLOT = 3
"""Backups a group episode may get, per episode it needs: a backup can hang too (a validation seed's backup
of a backup is what keeps a 1-slot group off the timeout), but an env that is merely slow must not cascade."""


@dataclass
class Attempts:
    """One place of a group episode: its first episode, then the backups and replays of it, in the order they
    were dispatched, with the outcome of each that ended (its trajectory; None: it failed or was lost).

    In training the place trains the first attempt in that order that did not fail, once it and every attempt
    before it ended, so how long an attempt took never decides which one trains (module docstring).
    """

    order: list[int] = field(default_factory=list)  # episode ids
    ended: dict[int, Trajectory | None] = field(default_factory=dict)

    def trained(self) -> Trajectory | None:
        """The attempt this place trains; None while an attempt before it runs, or when every one failed."""
        for episode_id in self.order:
            if episode_id not in self.ended:
                return None
            if (traj := self.ended[episode_id]) is not None:
                return traj
        return None

    @property
    def all_failed(self) -> bool:
        """Every attempt ended without a trajectory: the place needs a replay."""
        return len(self.ended) == len(self.order) and all(t is None for t in self.ended.values())

    def unused(self, trained: Trajectory) -> tuple[list[int], int]:
        """Once `trained` is kept: the attempts still running (to cancel) and how many others ended healthy
        (booked as stragglers)."""
        running = [e for e in self.order if e not in self.ended]
        healthy = sum(1 for t in self.ended.values() if t is not None and t is not trained)
        return running, healthy


def plan_backups(
    slow: Sequence[int], owner: Mapping[int, GroupEpisode], busy: dict[int, GroupEpisode], layout: EnvLayout
) -> list[tuple[GroupEpisode, int, int]]:
    """(group episode, slow episode id, env slot) of each backup to play now, for the `slow` episodes a worker
    reported (`owner`: running episode id -> its group episode; `busy`: layout group -> the group episode
    running on it, to which this lends the idle layout groups it uses). An episode without a free slot of
    its tag now gets none: the next report (each poll reports it while its call runs) tries again."""
    wanted = [
        (e, ge) for e in slow if (ge := owner.get(e)) is not None and _wants_backup(ge, e, layout.group_size)
    ]
    if not wanted:
        return []
    occupied = {ge.running[e] for e, ge in owner.items() if e in ge.running}
    planned = []
    for episode_id, ge in wanted:
        free = _free_slot(layout, busy, ge, occupied)
        if free is None:
            continue
        group, env_id = free
        if group != ge.layout_group and group not in ge.borrowed:
            ge.borrowed.append(group)
            busy[group] = ge
        occupied.add(env_id)
        ge.backed_up.add(episode_id)
        planned.append((ge, episode_id, env_id))
    return planned


def _wants_backup(ge: GroupEpisode, episode_id: int, group_size: int) -> bool:
    """Whether slow `episode_id` of `ge` gets a backup: its group and its place are open, it has none yet and
    the group has backups left."""
    return (
        not ge.closed
        and episode_id in ge.attempts
        and episode_id not in ge.backed_up
        and len(ge.backed_up) < BACKUPS_PER_SLOT * group_size
    )


def _free_slot(
    layout: EnvLayout, busy: Mapping[int, GroupEpisode], ge: GroupEpisode, occupied: set[int]
) -> tuple[int, int] | None:
    """(layout group, env slot) for a backup of `ge`: an idle slot of its own or lent groups first, then of
    a layout group of its tag that nothing runs on."""
    own = [ge.layout_group, *ge.borrowed]
    idle = [g for g in layout.groups_of_tag(ge.tag) if g not in busy]
    for group in (*own, *idle):
        for env_id in layout.env_ids_of_group(group):
            if env_id not in occupied:
                return group, env_id
    return None
