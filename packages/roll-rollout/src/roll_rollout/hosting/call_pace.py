"""Which env calls run inline on the env worker's event loop, and when they stop (`CallPace`, `InlineGrant`).

A call made by `EnvCalls.run_paced` (with a `CallPace`, one per env that owns its random state) runs on the event loop
itself, with no thread hop, while that env's previous call took under `pace.inline_below_s`: a hop costs
tens of microseconds and a GIL hand-over, more than a cheap step. A call that takes longer sends the env's
next calls back to the pool. The first call of an env, and every call after a slow one, runs in the pool,
so a slow env stalls the loop at most once; but an env that is fast and then hangs stalls it until it
returns (the timeout can only fail the call afterwards). So inline calls are for envs that declare
`never_blocks = True` (roll's built-in games: pure computations on in-memory state, no I/O, no waiting): by
default (`inline_below_s` None) those get `INLINE_OPT_IN_S`, every other env runs every call in the pool, under
its timeout; a number instead applies to every env owning its random state (0: none inline). The hint is read
by `roll_envs.hints`: a subclass that adds code of its own (a FrozenLake whose `step` calls a judge) does not
inherit it. And inline calls that keep holding the loop for `INLINE_REVOKE_S` (`REVOKE_AFTER` of them, at least
`REVOKE_SHARE` of the class's inline calls) show that their class blocks whatever it declares: the worker's
`InlineGrant` of that class is revoked, with one warning naming it, and the calls of every env of the class run
in the pool from then on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from roll_envs.hints import declares_never_blocks

T = TypeVar("T")
_log = logging.getLogger(__name__)

INLINE_BELOW_S: float | None = None
"""The default: calls of envs declaring `never_blocks` run inline under `INLINE_OPT_IN_S`; every other env's
calls run in the pool, under their timeout (see the module docstring)."""

INLINE_OPT_IN_S = 0.001
"""A threshold for envs known never to block: a call of one that took under 1 ms runs its next call inline."""

INLINE_REVOKE_S = 0.02
"""An inline call that held the event loop this long (twenty times `INLINE_OPT_IN_S`; a built-in game's step
takes microseconds) counts as blocking (`InlineGrant.record`)."""

REVOKE_AFTER = 3
"""Blocking inline calls of one env class before its grant is revoked: one could be the machine (a
preempted thread, a garbage collection), not the env."""

REVOKE_SHARE = 0.01
"""...and the least share of the class's inline calls they must be: a built-in on a loaded machine has a
stray slow call in thousands, an env whose step waits has one in every few."""


class InlineGrant:
    """Whether the calls of one env class may run inline in this worker: `open` until `REVOKE_AFTER` of its
    inline calls, and at least `REVOKE_SHARE` of them, held the event loop for `INLINE_REVOKE_S` (`record`),
    which says so once."""

    __slots__ = ("calls", "env_class", "open", "slow")

    def __init__(self, env_class: str) -> None:
        self.env_class = env_class
        self.open = True
        self.calls = self.slow = 0

    def record(self, what: str, took: float, bound: float) -> None:
        """Count one inline call that took `took` seconds; revoke the grant when they block (above)."""
        self.calls += 1
        if took < bound:
            return
        self.slow += 1
        if self.open and self.slow >= REVOKE_AFTER and self.slow >= REVOKE_SHARE * self.calls:
            self.open = False  # every env of the class goes to the pool from its next call
            _log.warning(
                "%s ran inline on the env worker's event loop for %.0f ms; %d of the %d inline calls of env class "
                "%s so far took over %.0f ms, and every other env of the worker waited: the class blocks, though "
                "it declares or inherits never_blocks = True. Its calls run in the thread pool from now on, under "
                "their timeout. Fix: set never_blocks = False on the class (`roll-envs check` says where the "
                "hint comes from).",
                what,
                took * 1000,
                self.slow,
                self.calls,
                self.env_class,
                bound * 1000,
            )


class CallPace:
    """How long one env's last call took: whether its next call may run inline (see the module docstring),
    while its class's `InlineGrant` is open."""

    __slots__ = ("fast", "grant", "inline_below_s")

    def __init__(self, inline_below_s: float, grant: InlineGrant | None = None) -> None:
        self.inline_below_s = inline_below_s
        self.grant = grant if grant is not None else InlineGrant("?")
        self.fast = False  # unknown until a call has been timed in the pool

    def timed(self, fn: Callable[..., T]) -> Callable[..., T]:
        """`fn`, recording whether it returned within `inline_below_s` (run in a pool thread)."""

        def call(*args: Any) -> T:
            began = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.fast = time.perf_counter() - began < self.inline_below_s

        return call


def pace_for(env: Any, inline_below_s: float | None, grants: dict[type, InlineGrant]) -> CallPace:
    """A fresh `CallPace` for `env` under the worker's `inline_below_s` (None: `INLINE_OPT_IN_S` where
    `never_blocks` holds, else 0), sharing its class's grant from `grants` (made on first use)."""
    below = inline_below_s
    if below is None:
        below = INLINE_OPT_IN_S if declares_never_blocks(env) else 0.0
    cls = type(env)
    grant = grants.get(cls)
    if grant is None:
        grant = grants[cls] = InlineGrant("?" if env is None else cls.__qualname__)
    return CallPace(below, grant)
