"""The one registry shape of roll-algos (`Registry`: advantage estimators, policy losses): name -> spec, the
entry-point plugin loader, the checks on what gets registered and the lookup that names the fix.

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
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from roll_algos.errors import AlgosError

__all__ = ["NAME_PATTERN", "Registry", "check_call_shape", "check_name", "import_plugins", "where"]


class _Spec(Protocol):
    @property
    def fn(self) -> Callable[..., Any]: ...


S = TypeVar("S", bound=_Spec)
F = TypeVar("F", bound=Callable[..., Any])

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


class Registry(Generic[S]):
    """One family of functions registered by name (each with its spec: a frozen record holding `fn`), in one
    call shape `fn(inputs, config) -> output`; installed packages add entries through the entry-point `group`,
    whose modules load on the first lookup that misses.

    Args:
        family: what it holds, for messages ("advantage estimator", "policy loss").
        register: the name of its registration decorator, for messages ("register_estimator").
        group: the entry-point group of its plugins.
        inputs, output: the call shape, for messages ("(AdvantageInputs, AdvantageConfig)", "AdvantageOutput").
        how_to_register: the sentence that ends a failed lookup.
    """

    def __init__(
        self, *, family: str, register: str, group: str, inputs: str, output: str, how_to_register: str
    ) -> None:
        self.family, self.register, self.group = family, register, group
        self.inputs, self.output, self.how_to_register = inputs, output, how_to_register
        self.entries: dict[str, S] = {}
        self.plugins_loaded = False
        self.plugin_errors: dict[str, str] = {}

    def key(self, name: object) -> str:
        """`name` as a registered key (`check_name`)."""
        return check_name(self.register, name)

    def decorator(self, key: str, build: Callable[[Any, str], S], replace: bool) -> Callable[[F], F]:
        """The decorator that registers `build(fn, description)` under `key` after checking `fn`'s call shape
        and that `key` is free (unless `replace`); the description is the first line of `fn`'s docstring."""

        def wrap(fn: F) -> F:
            caller = f"{self.register}({key!r})"
            check_call_shape(caller, fn, family=self.family, inputs=self.inputs, output=self.output)
            old = self.entries.get(key)
            if old is not None and old.fn is not fn and not replace:
                raise AlgosError(
                    f"{self.family} {key!r} is already registered ({where(old.fn)}); pick another name, or pass"
                    " replace=True to override it."
                )
            doc = (inspect.getdoc(fn) or "").strip().splitlines()
            self.entries[key] = build(fn, doc[0] if doc else "")
            return fn

        return wrap

    def load_plugins(self, force: bool = False) -> dict[str, str]:
        """Import every module listed in the registry's entry-point group (once, unless `force`).

        Returns the plugins that failed, name -> error (also reported as warnings; the others still load).
        """
        if self.plugins_loaded and not force:
            return dict(self.plugin_errors)
        self.plugins_loaded = True
        return import_plugins(self.group, self.family, self.plugin_errors)

    def names(self) -> list[str]:
        """The names of every registered entry (plugins included), sorted."""
        self.load_plugins()
        return sorted(self.entries)

    def get(self, name: object) -> S:
        """The spec registered as `name`, loading the plugins on a miss; `AlgosError` listing the registered
        names, the closest one, the plugins that failed to load and how to register one when there is none."""
        key = str(name)
        if key not in self.entries:
            self.load_plugins()
        if key not in self.entries:
            valid = sorted(self.entries)
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            failed = sorted(self.plugin_errors)
            broken = f" {self.family.capitalize()} plugins that failed to load: {failed}." if failed else ""
            raise AlgosError(
                f"{self.family}: expected one of {valid}, got {name!r}.{hint}{broken} {self.how_to_register}"
            )
        return self.entries[key]
