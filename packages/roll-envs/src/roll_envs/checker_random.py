"""`check_random_state_declaration`: the part of `check_env` that checks `BaseEnv.owns_random_state` (and
notes every hosting hint the env's class inherits but does not keep, `roll_envs.hints.dropped_hints`).

An env declaring `owns_random_state = True` has its calls run by roll without isolating `random` and
`np.random` (concurrently with other envs'), so it must never draw from them: a wrong declaration would
make a group's slots play different episodes. An undeclared env that never draws from them may declare
it and have its calls run concurrently; `check_env` says so in a note logged at level WARNING on this module's
logger (a log record, not a Python warning: a note must not fail a run that turns warnings into errors).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from roll_envs.hints import declares_own_random_state, dropped_hints

_log = logging.getLogger(__name__)


def check_random_state_declaration(
    env: Any, drew_from_globals: bool, interleave_unisolated: Callable[[], list[str]]
) -> list[str]:
    """Problems with `env`'s `owns_random_state` declaration, given whether its calls in the other checks
    drew from the global generators (`IsolatedEnv.drew_from_globals`); `interleave_unisolated()` runs the
    interleaving check without isolation (`check_interleaved(..., isolate=False)`).

    Declared: a draw from the globals, or an unisolated interleaving that differs, is a problem. Not
    declared: when neither happens, a logged note (not a problem) says it may declare. A hint inherited but
    dropped (the class adds code of its own) is noted too, with where it came from.
    """
    name = type(env).__name__
    for status in dropped_hints(env):
        _log.warning("%s", status.describe())
    if declares_own_random_state(env):
        if drew_from_globals:
            return [
                f"{name} declares owns_random_state = True, but its reset/step/render/close drew from (or "
                "reseeded) the process-wide `random` or `np.random`; roll runs a declared env's calls "
                "without isolating them, so a group's slots would play different episodes. Fix: draw only "
                "from the rng passed to new_episode (or self.np_random), or set owns_random_state = False."
            ]
        return [
            f"{problem} (run without isolation, as roll runs an env declaring owns_random_state = True; "
            "fix the env or set owns_random_state = False)"
            for problem in interleave_unisolated()
        ]
    if not drew_from_globals and not interleave_unisolated():
        _log.warning(
            "%s never drew from the process-wide `random` or `np.random` in these checks: if it never does, "
            "declare `owns_random_state = True` on the class, and roll runs its calls concurrently instead "
            "of one at a time per worker process (docs/rollout.md).",
            name,
        )
    return []
