"""What every env's baselines share: the held-out seeds they are scored on and `EnvBaselines`.

This module imports nothing from roll_envs, so `BaseEnv`, each env and each env's baseline code can
import it without an import cycle.
"""

from __future__ import annotations

from typing import NamedTuple

HELD_OUT_SEED_START = 1_000_000
"""First seed of the held-out episodes the baselines are scored on (disjoint from training seeds)."""


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
