"""Hosting hints: what an env class declares to its host (`BaseEnv.owns_random_state`, `BaseEnv.never_blocks`),
read so that a subclass cannot inherit a hint that is false for it.

A hint is a promise about the code of `reset`, `step` and what they call. A class declaring it vouches for
the code it defines and the code it inherits; it cannot vouch for code a subclass adds. So a hint holds for
a class only when no class below the declaring one (in the method resolution order, a mixin included)
defines code roll may run in a hosted call: any method, property or other descriptor except the few in
`NOT_HOSTED`. A subclass of FrozenLake whose `step` waits on a web call inherits `never_blocks = True` but
overrides `step`: the hint is dropped for it, and its calls run in the thread pool under their timeout. A
subclass that only sets class attributes (`config_cls`, `metric_aggregation`) keeps the hints; one whose code
keeps them true declares them again on its own class. `roll-envs check` prints which hints an env carries
and why (`hint_report`); `check_env`, and roll when it builds such an env, log a dropped one as a note.

A hint is the class's, never an instance's: an instance attribute cannot declare one. It can withdraw one its
config makes false: `self.never_blocks = False` in `__init__` (which roll runs before any hosted call, and a
frozen config cannot change after) makes the hint not hold for that instance alone. Sokoban does so for
`needs_detour` rooms, whose reset draws rooms until one needs a detour (docs/envs/sokoban.md).
"""

from __future__ import annotations

import logging
import threading
import types
from dataclasses import dataclass
from typing import Any

_log = logging.getLogger(__name__)
_noted: set[type] = set()
_noted_lock = threading.Lock()

HINTS = ("owns_random_state", "never_blocks")
"""The hosting hints of `roll_envs.BaseEnv`, each a class attribute that is True when declared."""

NOT_HOSTED = frozenset({"__init__", "instruction", "baselines", "has_baselines"})
"""Methods a subclass may define and keep its inherited hints: roll never runs them in a hosted call (the
constructor always runs in a pool thread with the random state isolated; the others are read at setup)."""

_HOOKED_DUNDERS = frozenset({"__getattr__", "__getattribute__"})
"""Dunders that run inside every call (all other dunders are not hosted code)."""


@dataclass(frozen=True)
class HintStatus:
    """Whether the hint `name` holds for `cls`: `declared_by` is the class whose body sets it (None: none
    does), `declared` whether it set it True, `overrides` the code defined below that class (method name,
    defining class), each of which drops an inherited True; `withdrawn`: the instance asked about set it False
    on itself (its config makes it false)."""

    name: str
    cls: type
    declared_by: type | None
    declared: bool
    overrides: tuple[tuple[str, type], ...]
    withdrawn: bool = False

    @property
    def holds(self) -> bool:
        """Whether roll treats the class (or the instance asked about) as declaring the hint."""
        return self.declared and not self.overrides and not self.withdrawn

    def describe(self) -> str:
        """One line for an env author: the hint, where it comes from, and whether it holds."""
        if not self.declared:
            where = "" if self.declared_by is None else f" (set False by {self.declared_by.__name__})"
            return f"{self.name}: not declared{where}"
        source = self.declared_by.__name__ if self.declared_by else "?"
        if self.withdrawn and not self.overrides:
            return f"{self.name}: withdrawn: declared True by {source}, but this instance sets it False (its config)"
        if not self.overrides:
            return f"{self.name}: holds (declared by {source})"
        methods = ", ".join(f"{m} ({c.__name__})" for m, c in self.overrides)
        return (
            f"{self.name}: dropped: declared True by {source}, but {self.cls.__name__} runs code of its own "
            f"there: {methods}. If that code keeps the promise, declare `{self.name} = True` on "
            f"{self.cls.__name__} (docs/rollout.md)."
        )


def hint_status(env: Any, name: str) -> HintStatus:
    """How the hint `name` stands for `env` (an instance or a class; an instance may have withdrawn it); see the
    module docstring."""
    cls = env if isinstance(env, type) else type(env)
    mro = cls.__mro__
    declared_by = next((c for c in mro if name in vars(c)), None)
    if declared_by is None:
        return HintStatus(name, cls, None, False, ())
    vouched = declared_by.__mro__
    overrides = tuple(
        (attr, owner)
        for owner in mro
        if owner not in vouched  # the classes the declaring one cannot vouch for: few, and small
        for attr, value in vars(owner).items()
        if _is_hosted_code(attr, value) and next(c for c in mro if attr in vars(c)) is owner
    )
    withdrawn = not isinstance(env, type) and getattr(env, "__dict__", {}).get(name) is False
    return HintStatus(name, cls, declared_by, vars(declared_by)[name] is True, overrides, withdrawn)


def hint_holds(env: Any, name: str) -> bool:
    """Whether the hint `name` holds for `env` (an instance or a class): declared True by a class that
    vouches for every method `env` runs (see the module docstring)."""
    return hint_status(env, name).holds


def declares_own_random_state(env: Any) -> bool:
    """Whether `owns_random_state` holds for `env` (`BaseEnv.owns_random_state`): its calls draw only from
    its own generators, so they need no isolation (and no process-wide lock)."""
    return hint_holds(env, "owns_random_state")


def declares_never_blocks(env: Any) -> bool:
    """Whether `never_blocks` holds for `env` (`BaseEnv.never_blocks`): its calls are bounded computations,
    so a fast one may run inline on the worker's event loop."""
    return hint_holds(env, "never_blocks")


def hint_report(env: Any) -> list[str]:
    """One line per hosting hint of `env`: declared by which class, and whether it holds or was dropped
    (what `roll-envs check` prints)."""
    return [hint_status(env, name).describe() for name in HINTS]


def note_dropped_hints(env: Any) -> None:
    """Log each hint `env`'s class inherits as True but does not keep (`HintStatus.describe`), once per class
    and process, at level WARNING: roll then hosts it as undeclared (its calls isolated, or in the pool),
    which is safe but slower, and the author should know why (a log record, not a Python warning)."""
    cls = env if isinstance(env, type) else type(env)
    with _noted_lock:
        if cls in _noted:
            return
        _noted.add(cls)
    for status in dropped_hints(cls):
        _log.warning("%s", status.describe())


def dropped_hints(env: Any) -> list[HintStatus]:
    """The hints `env` (an instance or a class) inherits as True but does not keep: its class defines code
    the declaring class cannot vouch for."""
    statuses = (hint_status(env, name) for name in HINTS)
    return [status for status in statuses if status.declared and status.overrides]


def _is_hosted_code(attr: str, value: Any) -> bool:
    """Whether a class attribute is code roll may run in a hosted call (a method, property or descriptor)."""
    if attr in NOT_HOSTED or isinstance(value, type):
        return False
    if attr.startswith("__") and attr.endswith("__") and attr not in _HOOKED_DUNDERS:
        return False
    if isinstance(value, (types.MemberDescriptorType, types.GetSetDescriptorType)):
        return False  # a __slots__ field: data
    return hasattr(type(value), "__get__")
