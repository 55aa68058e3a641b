"""Episode seeds: the training stream stays below `VALIDATION_SEED_BASE`, validation seeds above it.

Also the scheduler's seed-stream state (`SeedStream`: which seed which env slot plays under which ids)
and its check (a checkpoint may be corrupt or come from another roll version: it is validated before
anything is restored).
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Container, Mapping, Sequence
from typing import Any

from roll_rollout.errors import SchedulerError
from roll_rollout.plan.layout import EnvLayout, TagMix

__all__ = [
    "VALIDATION_SEED_BASE",
    "SeedStream",
    "first_training_seeds",
    "rng_state_problem",
    "sample_key",
    "validation_seeds",
]

VALIDATION_SEED_BASE = 1_000_000_000


def validation_seeds(count: int, offset: int = 0) -> list[int]:
    """Fixed held-out seeds; never produced by `RolloutScheduler.next_seeds`."""
    return [VALIDATION_SEED_BASE + offset + i for i in range(count)]


def first_training_seeds(seed: int, count: int) -> list[int]:
    """The first `count` seeds that a scheduler seeded with `seed` draws for training groups (`SeedStream`;
    the pipeline seeds its training scheduler with the run's `seed`), e.g. to check which validation
    episodes training also plays."""
    return _draw_training_seeds(random.Random(seed), count)


def _draw_training_seeds(rng: random.Random, count: int) -> list[int]:
    """The next `count` training seeds from `rng`: below `VALIDATION_SEED_BASE`, so never a validation seed."""
    return [rng.randrange(0, VALIDATION_SEED_BASE) for _ in range(count)]


def sample_key(seed: int, env_id: int, episode_id: int, turn: int) -> int:
    """The random stream of one turn's sampling, in [0, 2**63): the same key in every process and run.

    An episode's id comes from the scheduler's counter (saved in checkpoints), so a run replayed from the
    same state asks for the same keys, and the policy server samples each turn the same tokens whatever
    other turns share its batch. Seeds below `VALIDATION_SEED_BASE` and above keep training and validation
    streams apart.
    """
    packed = struct.pack("<4q", seed, env_id, episode_id, turn)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little") >> 1


OPTIONAL_STATE_KEYS = frozenset({"next_group"})
"""Keys a scheduler state may lack: checkpoints written before they existed did not hold them."""


def rng_state_problem(state: Any, expected: Mapping[str, Any]) -> str | None:
    """Why `state` is not a scheduler RNG state shaped like `expected`, or None."""
    required = set(expected) - OPTIONAL_STATE_KEYS
    if not isinstance(state, Mapping) or not required <= set(state) <= set(expected):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        return f"expected a map with keys {sorted(expected)}, got {got}"
    rng = state["rng"]
    if not isinstance(rng, Sequence) or len(rng) != len(expected["rng"]):
        return f"'rng' must be a list of {len(expected['rng'])} ints"
    if not all(type(v) is int and 0 <= v < 2**32 for v in rng):
        return "'rng' holds a value that is not an int in [0, 2**32)"
    for key in ("episodes", "groups"):
        if type(state[key]) is not int or state[key] < 0:
            return f"{key!r} must be an int >= 0, got {state[key]!r}"
    mix = state["tag_mix"]
    if not isinstance(mix, Mapping) or set(mix) != set(expected["tag_mix"]):
        return f"'tag_mix' must have the keys {sorted(expected['tag_mix'])}"
    if not all(type(v) is int and v >= 0 for v in mix.values()):
        return "'tag_mix' values must be ints >= 0"
    cursor = state.get("next_group", expected["next_group"])
    if not isinstance(cursor, Mapping) or set(cursor) != set(expected["next_group"]):
        return f"'next_group' must have the keys {sorted(expected['next_group'])}"
    if not all(type(v) is int and v >= 0 for v in cursor.values()):
        return "'next_group' values must be ints >= 0"
    return None


class SeedStream:
    """The scheduler's seed stream, its episode and group id counters, its tag mix and the round-robin
    cursor over each tag's layout groups: what a checkpoint holds (`state` / `set_state`). With them a
    restored scheduler plays the same seeds on the same env slots under the same episode ids (the
    sampling keys of the turns)."""

    def __init__(self, layout: EnvLayout, seed: int) -> None:
        self._layout = layout
        self._rng = random.Random(seed)
        self._episodes = 0
        self._groups = 0
        self.mix = TagMix(dict(zip(layout.tags, layout.num_groups_partition, strict=True)))
        self._next_group = {tag: 0 for tag in layout.tags}

    def training_seeds(self, count: int) -> list[int]:
        """Fresh training seeds (below 2**31, disjoint from `validation_seeds`)."""
        return _draw_training_seeds(self._rng, count)

    def new_episode_id(self) -> int:
        """The id of the next dispatched episode."""
        self._episodes += 1
        return self._episodes - 1

    def new_group_key(self) -> int:
        """The key (trajectory `group_id`) of the next group episode."""
        self._groups += 1
        return self._groups - 1

    def idle_group(self, tag: str, busy: Container[int]) -> int | None:
        """The next layout group of `tag`, round robin, that is not in `busy` (None if all are)."""
        groups = self._layout.groups_of_tag(tag)
        for i in range(len(groups)):
            group = groups[(self._next_group[tag] + i) % len(groups)]
            if group not in busy:
                self._next_group[tag] = (self._next_group[tag] + i + 1) % len(groups)
                return group
        return None

    def state(self) -> dict[str, Any]:
        """The whole state, JSON-friendly."""
        version, internal, _gauss = self._rng.getstate()
        return {
            "rng": [version, *internal],
            "episodes": self._episodes,
            "groups": self._groups,
            "tag_mix": self.mix.state(),
            "next_group": dict(self._next_group),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `state` returned; anything else raises `SchedulerError` (worded for the scheduler's
        `set_rng_state`) and changes nothing."""
        problem = rng_state_problem(state, self.state())
        if problem:
            raise SchedulerError(
                f"set_rng_state: {problem}; pass what rng_state() returned (the checkpoint's pipeline state "
                "is corrupt or from another roll version)"
            )
        rng = state["rng"]
        try:
            self._rng.setstate((rng[0], tuple(rng[1:]), None))
        except (ValueError, TypeError) as exc:
            raise SchedulerError(f"set_rng_state: not a random.Random state ({exc})") from exc
        self._episodes, self._groups = state["episodes"], state["groups"]
        self.mix.set_state(state["tag_mix"])
        cursor = state.get("next_group", dict.fromkeys(self._layout.tags, 0))  # may be absent: start over
        self._next_group = {
            tag: cursor[tag] % len(self._layout.groups_of_tag(tag)) for tag in self._layout.tags
        }
