"""What roll-algos' registries (advantage estimators, policy losses) share: the entry-point plugin loader and
the checks on what gets registered.

A plugin is a module that an installed package lists under a registry's entry-point group; importing it
runs its registration decorators:

    [project.entry-points."roll_algos.policy_losses"]
    my_losses = "my_pkg.losses"
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from typing import TypeVar

from roll_algos.errors import AlgosError

__all__ = ["NAME_PATTERN", "check_call_shape", "check_name", "find_registered", "import_plugins", "where"]

T = TypeVar("T")

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
"""A registered name: letters, digits, '_', '.', '-', starting with a letter."""


def import_plugins(group: str, family: str, errors: dict[str, str]) -> dict[str, str]:
    """Import every module listed in the entry-point `group` (its import registers its entries).

    A plugin that fails to import is recorded in `errors` (name -> "module: error") and warned about, and the
    others still load; one that loads is dropped from `errors`. `family` names the registry in the warning
    (e.g. "estimator"). Returns a copy of `errors`.
    """
    for ep in importlib.metadata.entry_points(group=group):
        try:
            ep.load()
            errors.pop(ep.name, None)
        except Exception as exc:  # a broken plugin must not break the others
            errors[ep.name] = f"{ep.value}: {exc}"
            warnings.warn(f"roll-algos {family} plugin {ep.name!r} ({ep.value}) failed: {exc}", stacklevel=3)
    return dict(errors)


def find_registered(
    entries: Mapping[str, T],
    name: object,
    *,
    load_plugins: Callable[[], object],
    family: str,
    plugin_errors: Mapping[str, str],
    how_to_register: str,
) -> T:
    """The entry registered as `name`, loading the plugins on a miss; `AlgosError` listing the registered names,
    the closest one, the plugins that failed to load and `how_to_register` when there is none. `family` starts
    the message (e.g. "advantage estimator")."""
    key = str(name)
    if key not in entries:
        load_plugins()
    if key not in entries:
        valid = sorted(entries)
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        failed = sorted(plugin_errors)
        broken = f" {family.capitalize()} plugins that failed to load: {failed}." if failed else ""
        raise AlgosError(f"{family}: expected one of {valid}, got {name!r}.{hint}{broken} {how_to_register}")
    return entries[key]


def where(fn: object) -> str:
    """`module.qualname` of a registered function, for messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def check_name(caller: str, name: object) -> str:
    """`name` as a str; `AlgosError` from `caller` (e.g. "register_estimator") unless it fits `NAME_PATTERN`."""
    key = str(name)
    if not NAME_PATTERN.match(key):
        raise AlgosError(
            f"{caller}: expected a name of letters, digits, '_', '.', '-' starting with a letter, got {name!r}."
        )
    return key


def check_call_shape(caller: str, fn: object, *, family: str, inputs: str, output: str) -> None:
    """Raise `AlgosError` unless `fn` is a synchronous function callable as `fn(inputs, config)`.

    Args:
        caller: the registration call, for the message (e.g. "register_estimator('grpo')").
        fn: the function being registered.
        family: what the registry holds ("estimator", "policy loss").
        inputs: the two argument types, e.g. "(AdvantageInputs, AdvantageConfig)".
        output: the return type, e.g. "AdvantageOutput".
    """
    if not callable(fn) or inspect.iscoroutinefunction(fn) or inspect.isclass(fn):
        raise AlgosError(f"{caller}: expected a function fn(inputs, config) -> {output}, got {fn!r}.")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to check (a builtin): the first call will tell
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise AlgosError(
            f"{caller}: {where(fn)}{signature} cannot be called as fn(inputs, config) ({exc}); every {family}"
            f" takes exactly {inputs}."
        ) from None
