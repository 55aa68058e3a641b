"""Reference success rates that a trained agent is judged against, for any env that provides them.

An env provides baselines through its `BaseEnv.baselines(turns, episodes, seeds)` hook (and says whether
it has any with `BaseEnv.has_baselines`); `env_baselines` and `has_baselines` are the entry points that
callers use, for built-in and third-party envs alike. Baselines are scored on the episodes of the seeds
given (a run passes its validation seeds, so they judge its validation success on the same episodes), else
on the episodes seeded from `HELD_OUT_SEED_START`. `distinct_observations` counts how many different first
observations such episodes show (four_choice's show 4, whatever their number), `first_observations` lists
them (a caller compares validation episodes with training ones by them).

The built-ins' baseline code lives beside each env: FrozenLake's in `roll_envs.envs.frozen_lake.baselines`,
Sokoban's in `roll_envs.envs.sokoban.baselines`. FrozenLake's names stay readable from here for one release
(with a `DeprecationWarning`), loaded on first use so that this module imports no game.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from typing import Any

from roll_envs._moved import REMOVED_IN
from roll_envs.base import BaseEnv
from roll_envs.baseline_types import HELD_OUT_SEED_START, EnvBaselines, scored_seeds

_FROZEN_LAKE_NAMES = (
    "PRECOMPUTED_SEQUENCES",
    "best_fixed_sequence",
    "frozen_lake_baselines",
    "goal_distances",
    "random_policy_success",
    "sequence_success",
    "transition_table",
)
"""FrozenLake's baseline names, still readable from this module until roll-envs `REMOVED_IN`."""

__all__ = [
    "HELD_OUT_SEED_START",
    "EnvBaselines",
    "distinct_observations",
    "env_baselines",
    "first_observations",
    "has_baselines",
    *_FROZEN_LAKE_NAMES,
]


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


def env_baselines(
    env: Any, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None
) -> EnvBaselines | None:
    """The baselines of a built env at `turns` turns (one move per turn) on the episodes of `seeds` (None:
    `episodes` episodes seeded from `HELD_OUT_SEED_START`), from its `BaseEnv.baselines` hook: FrozenLake
    with deterministic ice (any size and p), Sokoban (any variant) and four_choice among the built-ins; None
    for envs without baselines. The result's `seeds` names the seeds scored. A hook that returns anything
    else than `EnvBaselines` or None, or that takes no `seeds` when seeds are given, is a TypeError naming
    the env class.

    >>> import roll_envs
    >>> found = env_baselines(roll_envs.make("sokoban"), turns=30, episodes=20)
    >>> found.env, sorted(found.success), found.seeds[:2]
    ('Sokoban', ['best_fixed_10_moves', 'optimal', 'push_rule', 'random'], (1000000, 1000001))
    """
    if not has_baselines(env):
        return None
    scored = scored_seeds(episodes, seeds)
    if seeds is None:
        found = env.baselines(turns, episodes)
    elif not _takes_seeds(env.baselines):
        raise TypeError(
            f"{type(env).__name__}.baselines(turns, episodes) takes no seeds, so its baselines cannot be"
            " scored on the run's validation episodes: add a parameter `seeds: Sequence[int] | None = None`"
            " and score the episodes of those seeds when it is given"
        )
    else:
        found = env.baselines(turns, len(scored), seeds=scored)
    if found is None:
        return None
    if not isinstance(found, EnvBaselines):  # a third-party hook, checked once here
        raise TypeError(
            f"{type(env).__name__}.baselines must return roll_envs.EnvBaselines or None, got "
            f"{type(found).__name__}: wrap the success rates as EnvBaselines(env, episodes, turns, success, note, details)"
        )
    return found if found.seeds else found._replace(seeds=scored)


def _takes_seeds(hook: Any) -> bool:
    """Whether a baselines hook accepts `seeds=` (a parameter of that name, or **kwargs)."""
    params = inspect.signature(hook).parameters.values()
    return any(p.name == "seeds" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def first_observations(env: Any, seeds: Sequence[int]) -> list[str]:
    """The first observation `env.reset(seed=s)` shows for each of `seeds`, in order (resets `env`; an
    observation that is not text is given by its repr): two episodes with the same one open alike."""
    observations = (env.reset(seed=seed)[0] for seed in seeds)
    return [o if isinstance(o, str) else repr(o) for o in observations]


def distinct_observations(env: Any, seeds: Sequence[int]) -> int:
    """How many different first observations `env.reset(seed=s)` shows over `seeds` (`first_observations`).
    A handful means the episodes repeat the same prompts: four_choice shows 4 (one per colour) whatever
    the number of seeds.

    >>> import roll_envs
    >>> distinct_observations(roll_envs.make("four_choice", render_mode=None), range(64))
    4
    """
    return len(set(first_observations(env, seeds)))
