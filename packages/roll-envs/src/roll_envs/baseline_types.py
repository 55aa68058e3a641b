"""What every env's baselines share: the seeds they are scored on by default and `EnvBaselines`.

This module imports nothing from roll_envs, so `BaseEnv`, each env and each env's baseline code can
import it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

HELD_OUT_SEED_START = 1_000_000
"""First seed of the episodes baselines are scored on when no seeds are given (`roll baselines --env`).

These seeds are not disjoint from a roll run's training seeds (drawn from [0, 10**9)); a run scores its
baselines on its own validation seeds (from 10**9) instead, the episodes its validation success is measured on.
"""


class EnvBaselines(NamedTuple):
    """An env's reference policies on held-out episodes at one turn cap, as a run reports them."""

    env: str
    """Which game, e.g. `FrozenLake` or `Sokoban`."""
    episodes: str
    """What an episode is called, e.g. `maps` or `rooms`."""
    turns: int
    """The turn cap they were computed at."""
    success: dict[str, float]
    """Success rate of each reference policy (the reference lines of a learning curve)."""
    note: str
    """One sentence on how to read them."""
    details: dict[str, float]
    """Other measured numbers (Sokoban: the shortest solutions' mean and max moves, unsolvable rooms)."""
    seeds: tuple[int, ...] = ()
    """The seeds of the episodes they were scored on (`env_baselines` fills it in)."""
    observations: int | None = None
    """How many distinct first observations those episodes show (`distinct_observations`); None: not counted."""
    in_training: tuple[int, int] | None = None
    """(k, n): k of those episodes open with the first observation of one of the first n training episodes
    (roll-pipeline counts it for a run's validation tags); None: not counted."""


def scored_seeds(episodes: int, seeds: Sequence[int] | None = None) -> tuple[int, ...]:
    """The seeds a baselines hook scores: `seeds` when given, else the `episodes` seeds from
    `HELD_OUT_SEED_START`."""
    return tuple(range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes) if seeds is None else seeds)
