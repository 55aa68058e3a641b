"""The old flat paths of the modules that moved into rooms, kept importable for one release.

No file stands at an old path: `install` puts a finder on `sys.meta_path` that answers only the names in
`MOVED`. Importing one warns with a `DeprecationWarning` naming the new path and makes the old name the new
module itself in `sys.modules`, so `roll_rollout.worker.EnvWorker is roll_rollout.hosting.worker.EnvWorker`
(monkeypatching and pickles agree; a class's `__module__` is its new path).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.3.0"
"""The roll-rollout release that drops the old paths."""

_ROOMS = {
    "hosting": (
        "agent_manager",
        "agent_turns",
        "call_pace",
        "env_calls",
        "env_child",
        "env_manager",
        "env_process",
        "heap",
        "players",
        "worker",
    ),
    "scheduling": ("backups", "group_queue", "groups", "pool", "rollout_metrics", "scheduler", "settings"),
    "policies": (
        "agent_proxy",
        "json_http",
        "openai_chat",
        "openai_fields",
        "openai_policy",
        "openai_responses",
        "openai_stream",
        "policy",
    ),
    "plan": ("layout", "seeds"),
}

MOVED = {f"roll_rollout.{m}": f"roll_rollout.{room}.{m}" for room, ms in _ROOMS.items() for m in ms}
"""Old path -> new path of every moved module."""


def load_moved(old: str) -> ModuleType:
    """The new module of the old path `old`, now also `sys.modules[old]`, warning that it moved."""
    new = MOVED[old]
    # stacklevel 3: past this function and its caller, to the import statement (importlib's frames are
    # skipped by `warnings`).
    warnings.warn(
        f"{old} moved to {new}: import it from there ({old} goes away in roll-rollout {REMOVED_IN}).",
        DeprecationWarning,
        stacklevel=3,
    )
    module = sys.modules[old] = importlib.import_module(new)
    return module


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of `MOVED` only; loading one replaces it in `sys.modules` by the new module (the
    import system then hands out whatever `sys.modules` holds under the name)."""

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain placeholder module, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        load_moved(module.__name__)


def install() -> None:
    """Put the finder of the old paths on `sys.meta_path` (once per process)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
