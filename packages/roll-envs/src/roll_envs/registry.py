"""The env registry: `register(id, entry_point, config)`, `make(id, **config)`, `list_envs()`.

Ids are ROLL `env_type` strings (`frozen_lake`, `sokoban`, ...). Lookup also accepts any spelling
that differs only in case and punctuation (`FrozenLake`, `frozen-lake`). Third-party packages
register envs on install through the entry-point group `roll_envs.envs`:

    [project.entry-points."roll_envs.envs"]
    my_game = "my_pkg.env:MyGameEnv"          # a BaseEnv subclass, registered under the name
    more = "my_pkg:register_envs"            # or a function that calls roll_envs.register(...)

A namespace maps every id `prefix:rest` to one env class, so that a library's envs need no listing:
`register_namespace("gem", "roll_envs.adapters.gem:GemEnv", id_field="env_id")` makes
`make("gem:game:Minesweeper-v0-easy")` build `GemEnv(env_id="game:Minesweeper-v0-easy")`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from roll_envs.config import build_config
from roll_envs.errors import RegistrationError, UnknownEnvError, did_you_mean

ENTRY_POINT_GROUP = "roll_envs.envs"
"""The Python entry-point group through which installed packages register their envs."""

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-/]*$")


@dataclass(frozen=True)
class EnvSpec:
    """A registered env: its id, where its class lives, its config model and default config values."""

    id: str
    entry_point: str | Callable[..., Any]
    config: type[BaseModel] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def load(self) -> Callable[..., Any]:
        """Import and return the env class (or factory) named by `entry_point`."""
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise RegistrationError(
                f"env {self.id!r}: entry point {self.entry_point!r} does not load ({exc}). "
                "Fix: use 'package.module:ClassName' naming an importable class."
            ) from exc
        return obj

    def config_model(self) -> type[BaseModel] | None:
        """The config model: the registered one, else the class's `config_cls`, else None."""
        if self.config is not None:
            return self.config
        return getattr(self.load(), "config_cls", None)

    def make(self, render_mode: str | None = "text", **config: Any) -> Any:
        """Validate the config (defaults updated with `config`) and build the env."""
        factory = self.load()
        model = self.config_model()
        merged = {**self.defaults, **config}
        if model is None:
            return factory(render_mode=render_mode, **merged)
        return factory(build_config(model, merged, {}, env_name=self.id), render_mode=render_mode)


@dataclass(frozen=True)
class NamespaceSpec:
    """A registered id prefix: `prefix:rest` builds `entry_point` with config field `id_field` set to `rest`."""

    prefix: str
    entry_point: str | Callable[..., Any]
    id_field: str
    config: type[BaseModel] | None = None
    description: str = ""

    def resolve(self, rest: str) -> EnvSpec:
        """The `EnvSpec` of `prefix:rest`."""
        return EnvSpec(
            f"{self.prefix}:{rest}", self.entry_point, self.config, {self.id_field: rest}, self.description
        )


_REGISTRY: dict[str, EnvSpec] = {}
_NAMESPACES: dict[str, NamespaceSpec] = {}
_plugins_loaded = False
_plugin_errors: dict[str, str] = {}


def _key(env_id: str) -> str:
    return re.sub(r"[^a-z0-9]", "", env_id.lower())


def register(
    id: str,
    entry_point: str | Callable[..., Any],
    config: type[BaseModel] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    description: str = "",
    override: bool = False,
) -> EnvSpec:
    """Register an env under `id`.

    Args:
        id: the `env_type` users write in configs, e.g. "my_game".
        entry_point: "package.module:ClassName" (imported on first `make`) or the class itself.
            It is called as `entry_point(config_model_instance, render_mode=...)`.
        config: the pydantic config model; default: the class's `config_cls`.
        defaults: config values applied before the user's (variants of one class, e.g. larger_sokoban).
        description: one line shown by `roll-envs list`.
        override: replace an existing registration instead of raising.
    """
    _check_registration("env", "id", id, entry_point, _REGISTRY, override)
    spec_ = EnvSpec(id, entry_point, config, dict(defaults or {}), description)
    _REGISTRY[id] = spec_
    return spec_


def register_namespace(
    prefix: str,
    entry_point: str | Callable[..., Any],
    *,
    id_field: str,
    config: type[BaseModel] | None = None,
    description: str = "",
    override: bool = False,
) -> NamespaceSpec:
    """Register every id `prefix:rest` at once: `make("prefix:rest", **cfg)` builds `entry_point` with
    config `{id_field: rest, **cfg}` (an adapter naming a library's env by the library's own id).

    Args:
        prefix: the part before the first ':', e.g. "textarena"; same rules as an env id.
        entry_point: "package.module:ClassName" (imported on first `make`) or the class itself.
        id_field: the config field that receives `rest`, e.g. "env_id".
        config: the pydantic config model; default: the class's `config_cls`.
        description: one line shown by `roll-envs list`.
        override: replace an existing namespace instead of raising.
    """
    _check_registration("namespace", "prefix", prefix, entry_point, _NAMESPACES, override)
    ns = NamespaceSpec(prefix, entry_point, id_field, config, description)
    _NAMESPACES[prefix] = ns
    return ns


def _check_registration(
    kind: str, word: str, name: Any, entry_point: Any, table: Mapping[str, Any], override: bool
) -> None:
    """Refuse an ill-formed `name` (an env id or a namespace prefix) or `entry_point`, or, without `override`,
    a `name` that `table` holds for another entry point."""
    label = f"{kind} {word}" if kind == "env" else kind
    if not isinstance(name, str) or not _ID.match(name):
        raise RegistrationError(
            f"{label} {name!r} is not valid; expected letters, digits, '_', '-', '.', '/' starting with a letter."
        )
    if isinstance(entry_point, str) and (":" not in entry_point or entry_point.startswith(":")):
        raise RegistrationError(
            f"{kind} {name!r}: entry point {entry_point!r} is malformed; expected 'package.module:ClassName'."
        )
    if not isinstance(entry_point, str) and not callable(entry_point):
        raise RegistrationError(
            f"{kind} {name!r}: entry point must be a 'module:Class' string or a class; got {entry_point!r}."
        )
    known = table.get(name)
    if known is not None and not override and known.entry_point != entry_point:
        raise RegistrationError(
            f"{label} {name!r} is already registered to {known.entry_point!r}; "
            f"pick another {word} or pass override=True."
        )


def registered_namespaces() -> list[NamespaceSpec]:
    """Every registered id prefix (plugins included), sorted by prefix."""
    load_plugins()
    return [_NAMESPACES[k] for k in sorted(_NAMESPACES)]


def load_plugins(force: bool = False) -> dict[str, str]:
    """Register the envs of every installed package in the `roll_envs.envs` entry-point group.

    Returns the plugins that failed, name -> error (they are also reported as warnings).
    """
    global _plugins_loaded
    if _plugins_loaded and not force:
        return dict(_plugin_errors)
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if isinstance(obj, type):
                register(ep.name, obj, override=True)
            elif callable(obj):
                obj()
            else:
                raise RegistrationError(f"it is a {type(obj).__name__}, not an env class or a function")
            _plugin_errors.pop(ep.name, None)
        except Exception as exc:  # a broken plugin must not break the others
            _plugin_errors[ep.name] = f"{ep.value}: {exc}"
            warnings.warn(f"roll-envs plugin {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2)
    return dict(_plugin_errors)


def spec(id: str) -> EnvSpec:
    """The `EnvSpec` of `id` (any spelling differing in case or punctuation); plugins load on a miss."""
    found = _find(id)
    if found is None and not _plugins_loaded:
        load_plugins()
        found = _find(id)
    if found is None:
        known = list_envs() + [f"{n.prefix}:*" for n in registered_namespaces()]
        broken = f" Plugins that failed to load: {sorted(_plugin_errors)}." if _plugin_errors else ""
        raise UnknownEnvError(
            f"no env registered as {id!r}.{did_you_mean(str(id), known)} Registered: {', '.join(known)}."
            f"{broken} Fix: check the id, or install the package that provides it."
        )
    return found


def _find(env_id: object) -> EnvSpec | None:
    if not isinstance(env_id, str):
        return None
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    prefix, colon, rest = env_id.partition(":")
    if colon and rest:
        ns = _NAMESPACES.get(prefix) or next(
            (n for n in _NAMESPACES.values() if _key(n.prefix) == _key(prefix)), None
        )
        return ns.resolve(rest) if ns is not None else None
    matches = [s for s in _REGISTRY.values() if _key(s.id) == _key(env_id)]
    return matches[0] if len(matches) == 1 else None


def make(id: str, *, render_mode: str | None = "text", **config: Any) -> Any:
    """Build the env registered as `id` with its config validated from `config`.

    >>> env = make("frozen_lake", size=4)
    >>> type(env).__name__
    'FrozenLakeEnv'
    """
    return spec(id).make(render_mode=render_mode, **config)


def list_envs() -> list[str]:
    """The ids of every registered env (plugins included), sorted."""
    load_plugins()
    return sorted(_REGISTRY)


def registered_specs() -> list[EnvSpec]:
    """Every registered `EnvSpec` (plugins included), sorted by id."""
    return [_REGISTRY[k] for k in list_envs()]
