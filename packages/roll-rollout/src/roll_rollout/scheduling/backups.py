"""Backup episodes: which episodes get one, on which env slot, and which attempt at a place trains.

An env worker reports an episode whose reset or step has run past its slow-call threshold
(`EnvCalls.slow_after_s`: `max(backup_after_s, 200x the median of the worker's recent calls)`), with the
turns it played so far (`prefix_digest`); the scheduler then plays one more episode of that group episode on
a free env slot of the same tag: a finished slot of the group itself, or of a layout group nothing else
needs, which stays lent until the group episode closes. A backup is a *replica*: it plays the same seed with
the same sampling and the same sampling keys (`EpisodeJob.key`: its original's env slot and episode id), so
a policy that samples by key takes the original's actions. A backup that is slow in turn gets one too, up
to `BACKUPS_PER_SLOT` per episode the group needs (`plan_backups`). What a backup counts for depends on
`SchedulerSettings.race_backups`:

- training (False): a call is slow because of the action the policy chose (heavy code in a sandbox), so
  keeping the first episodes to finish among independent draws would train a sample filtered by speed. An
  episode, its backups and its replays are the `Attempts` at one place of the group, and the place trains
  the first of them, in dispatch order, that did not fail: the original whenever it ends healthy, whatever
  its time (its backups are cancelled, or booked as stragglers), a backup only once the original failed (an
  env error, or its call hit `env_step_timeout_s`). A replica that ends healthy while the attempts before
  it still run trains at once instead, when it is exact (`replica_problem`): the policy samples by key
  (`SchedulerSettings.keyed_sampling`), every turn of the replica comes from the weights the group began
  with, and every attempt still running reported a prefix the replica played token for token (response
  ids, observations and policy versions). Then the attempts are one trajectory played twice and whichever
  ends first selects nothing the policy chose. Otherwise the rule above holds, and the scheduler counts
  `rollout/backup_replicas_unraced` and logs why once. What the check cannot see: the turns an original
  would still play after its slow call (with the same weights, key and prompt, the same tokens, up to the
  float rounding of a batched forward moving a sampled token across its draw; and the same observations
  only if the env's outcomes depend on its seed and the actions alone, as a game's do, not a clock's or a
  service's), and turns an original played after its last report (polls are about `poll_wait_s` apart).
- validation (True): whichever episodes finish first complete the group and the rest are cancelled, as
  for redundant slots, so a hung call holds a pass, which needs every seed, for about the threshold
  instead of the whole `env_step_timeout_s`. Validation seeds are fixed and its scores train nothing.

A backup's episode id comes from a stream of its own (`BACKUP_EPISODE_IDS`), so how many backups call times
caused never shifts the ids, and the sampling keys, of the episodes dispatched after them; a place's replay
after every attempt failed is a fresh draw (its own id and slot make its keys).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roll_rollout.schema import Trajectory, prefix_digest

if TYPE_CHECKING:
    from roll_rollout.plan.layout import EnvLayout
    from roll_rollout.scheduling.groups import GroupEpisode
    from roll_rollout.scheduling.settings import SchedulerSettings

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
    prefixes: dict[int, tuple[int, str]] = field(
        default_factory=dict
    )  # id -> latest slow report (turns, digest)
    key: tuple[int, int] | None = (
        None  # sampling key fields of its latest non-backup attempt: its backups' too
    )

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


@dataclass(frozen=True)
class Settled:
    """What the scheduler does once an attempt at a place ended (`settle`): replay the place, or complete it
    with `kept`, cancelling the attempts still running and booking `stragglers` other healthy ones; neither
    while an attempt before the one that would train still runs."""

    replay: bool = False
    kept: Trajectory | None = None
    cancel: tuple[int, ...] = ()
    stragglers: int = 0


def settle(
    ge: GroupEpisode,
    attempts: Attempts,
    episode_id: int,
    traj: Trajectory | None,
    settings: SchedulerSettings,
    note_replica: Callable[[str | None], None],
) -> Settled:
    """Attempt `episode_id` at a place of open `ge` ended: healthy (`traj`), or failed or lost (None).
    Validation (`race_backups`) keeps whatever finishes first and replays a failure; training keeps the attempt
    the place trains (`Attempts.trained`) once known, and replays when every attempt failed. `note_replica`
    hears the outcome of each replica check (`replica_problem`)."""
    if settings.race_backups:
        return Settled(replay=traj is None, kept=traj)
    attempts.ended[episode_id] = traj
    kept = attempts.trained()
    if kept is None and traj is not None:  # an attempt before it still runs: is it an exact replica?
        note_replica(problem := replica_problem(attempts, traj, ge.version, settings))
        kept = traj if problem is None else None
    if kept is None:
        return Settled(replay=attempts.all_failed)
    running, healthy = attempts.unused(kept)
    for attempt in attempts.order:
        del ge.attempts[attempt]  # the place is settled: what ends of it later is a straggler
    return Settled(kept=kept, cancel=tuple(running), stragglers=healthy)


def replica_problem(
    attempts: Attempts, traj: Trajectory, group_version: int, settings: SchedulerSettings
) -> str | None:
    """Why healthy attempt `traj` may not train at once, ahead of the attempts before it that still run
    (None: it is an exact replica of each; module docstring). Called only while one of those runs."""
    if not settings.keyed_sampling:
        return "the policy is not declared to sample by key (SchedulerSettings.keyed_sampling)"
    if any(turn.policy_version != group_version for turn in traj.turns):
        return f"a turn of the replica comes from other weights than version {group_version}, the group's"
    earlier = attempts.order[: attempts.order.index(traj.episode_id)]
    for episode_id in (e for e in earlier if e not in attempts.ended):
        if episode_id not in attempts.prefixes:
            return "an attempt it would replace never reported what it played"
        played, digest = attempts.prefixes[episode_id]
        if played > len(traj.turns) or prefix_digest(traj.turns[:played]) != digest:
            return "it did not play what the attempt it would replace played (sampling or env not replayed)"
    return None


def note_prefixes(reports: Sequence[Sequence[Any]], owner: Mapping[int, GroupEpisode]) -> None:
    """Keep each slow episode's latest [episode id, turns played, digest] report on its place."""
    for episode_id, played, digest in reports:
        ge = owner.get(episode_id)
        if ge is not None and (attempts := ge.attempts.get(episode_id)) is not None:
            attempts.prefixes[episode_id] = (int(played), str(digest))


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
