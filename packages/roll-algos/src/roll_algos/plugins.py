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
from collections.abc import Callable, Collection, Sequence
from typing import Any, Generic, Protocol, TypeVar

from roll_algos.errors import AlgosError

__all__ = ["NAME_PATTERN", "Registry", "where"]

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
"""A registered name: letters, digits, '_', '.', '-', starting with a letter."""


class _Spec(Protocol):
    @property
    def fn(self) -> Callable[..., Any]: ...


S = TypeVar("S", bound=_Spec)
F = TypeVar("F", bound=Callable[..., Any])


def where(fn: object) -> str:
    """`module.qualname` of a registered function, for messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class Registry(Generic[S]):
    """Functions of one call shape `fn(inputs, config) -> output` by name, each with its spec (a frozen record
    holding `fn`); installed packages add entries through the entry-point `group`, loaded on the first miss.

    `family` ("advantage estimator") and `register` (the decorator's name) start the messages; `shape` is
    (inputs, output), e.g. ("(AdvantageInputs, AdvantageConfig)", "AdvantageOutput"); `how_to_register` ends
    a failed lookup's message.
    """

    def __init__(self, family: str, register: str, group: str, shape: tuple[str, str], how_to_register: str):
        self.family, self.register, self.group = family, register, group
        self.shape, self.how_to_register = shape, how_to_register
        self.entries: dict[str, S] = {}
        self.plugins_loaded = False
        self.plugin_errors: dict[str, str] = {}

    def key(self, name: object) -> str:
        """`name` as a str; `AlgosError` unless it fits `NAME_PATTERN`."""
        key = str(name)
        if not NAME_PATTERN.match(key):
            raise AlgosError(
                f"{self.register}: expected a name of letters, digits, '_', '.', '-' starting with a letter, got"
                f" {name!r}."
            )
        return key

    def check_options(
        self, key: str, options: Sequence[str], valid: Collection[str], what: str, note: str
    ) -> None:
        """`AlgosError` unless `options` is a tuple of names in `valid`; `what` and `note` complete the message."""
        if isinstance(options, str) or any(o not in valid for o in options):
            raise AlgosError(
                f"{self.register}({key!r}): options must be a tuple of {what}, got {options!r}; {note}."
            )

    def decorator(self, key: str, build: Callable[[Any, str], S], replace: bool) -> Callable[[F], F]:
        """The decorator that registers `build(fn, description)` under `key` once `fn` is a synchronous function
        callable as `fn(inputs, config)` and `key` is free (or `replace`); the description is `fn`'s first
        docstring line."""

        def wrap(fn: F) -> F:
            self._check_call_shape(f"{self.register}({key!r})", fn)
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

    def _check_call_shape(self, caller: str, fn: object) -> None:
        inputs, output = self.shape
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
                f"{caller}: {where(fn)}{signature} cannot be called as fn(inputs, config) ({exc}); every"
                f" {self.family} takes exactly {inputs}."
            ) from None

    def load_plugins(self, force: bool = False) -> dict[str, str]:
        """Import every module listed in the registry's entry-point group (once, unless `force`).

        Returns the plugins that failed, name -> "module: error" (also warned about; the others still load).
        """
        if self.plugins_loaded and not force:
            return dict(self.plugin_errors)
        self.plugins_loaded = True
        for ep in importlib.metadata.entry_points(group=self.group):
            try:
                ep.load()
                self.plugin_errors.pop(ep.name, None)
            except Exception as exc:  # a broken plugin must not break the others
                self.plugin_errors[ep.name] = f"{ep.value}: {exc}"
                warnings.warn(
                    f"roll-algos {self.family} plugin {ep.name!r} ({ep.value}) failed: {exc}", stacklevel=2
                )
        return dict(self.plugin_errors)

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
