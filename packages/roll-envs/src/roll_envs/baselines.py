"""Reference success rates that a trained agent is judged against, for any env that provides them.

An env provides baselines through its `BaseEnv.baselines(turns, episodes)` hook (and says whether it
has any with `BaseEnv.has_baselines`); `env_baselines` and `has_baselines` are the entry points that
callers use, for built-in and third-party envs alike. Baselines are scored on held-out episodes, seeded
from `HELD_OUT_SEED_START`.

The built-ins' baseline code lives beside each env: FrozenLake's in `roll_envs.envs.frozen_lake.baselines`,
Sokoban's in `roll_envs.envs.sokoban.baselines`. FrozenLake's names stay readable from here for one release
(with a `DeprecationWarning`), loaded on first use so that this module imports no game.
"""

from __future__ import annotations

import warnings
from typing import Any

from roll_envs._moved import REMOVED_IN
from roll_envs.base import BaseEnv
from roll_envs.baseline_types import HELD_OUT_SEED_START, EnvBaselines

_FROZEN_LAKE_NAMES = (
    "PRECOMPUTED_SEQUENCES",
    "SEARCH_MAPS",
    "SEARCH_SEED_START",
    "best_fixed_sequence",
    "fixed_sequence_for",
    "frozen_lake_baselines",
    "goal_distances",
    "random_policy_success",
    "sequence_success",
    "transition_table",
)
"""FrozenLake's baseline names, still readable from this module until roll-envs `REMOVED_IN`."""

__all__ = ["HELD_OUT_SEED_START", "EnvBaselines", "env_baselines", "has_baselines", *_FROZEN_LAKE_NAMES]


def __getattr__(name: str) -> Any:
    """FrozenLake's baseline names, from `roll_envs.envs.frozen_lake.baselines`, with a DeprecationWarning."""
    if name not in _FROZEN_LAKE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"roll_envs.baselines.{name} moved to roll_envs.envs.frozen_lake.baselines.{name}: import it from "
        f"there (roll_envs.baselines keeps it until roll-envs {REMOVED_IN}).",
        DeprecationWarning,
        stacklevel=2,
    )
    from roll_envs.envs.frozen_lake import baselines

    return getattr(baselines, name)


def has_baselines(env: Any) -> bool:
    """Whether `env_baselines` has numbers for this built env, answered without computing them: its
    `BaseEnv.has_baselines` (built-ins: FrozenLake with deterministic ice, every Sokoban variant); False
    for anything that is not a `BaseEnv`."""
    return isinstance(env, BaseEnv) and bool(env.has_baselines)


def env_baselines(env: Any, turns: int, episodes: int = 1000) -> EnvBaselines | None:
    """The baselines of a built env at `turns` turns (one move per turn) on `episodes` held-out episodes,
    from its `BaseEnv.baselines` hook: FrozenLake with deterministic ice (any size and p) and Sokoban (any
    variant) among the built-ins; None for envs without baselines. A hook that returns anything else than
    `EnvBaselines` or None is a TypeError naming the env class.

    >>> import roll_envs
    >>> found = env_baselines(roll_envs.make("sokoban"), turns=30, episodes=20)
    >>> found.env, sorted(found.success)
    ('Sokoban', ['optimal', 'random'])
    """
    if not has_baselines(env):
        return None
    found = env.baselines(turns, episodes)
    if found is not None and not isinstance(found, EnvBaselines):  # a third-party hook, checked once here
        raise TypeError(
            f"{type(env).__name__}.baselines must return roll_envs.EnvBaselines or None, got "
            f"{type(found).__name__}: wrap the success rates as EnvBaselines(env, episodes, turns, success, note, details)"
        )
    return found
