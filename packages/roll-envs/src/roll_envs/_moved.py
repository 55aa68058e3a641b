"""The old paths of moved modules, kept importable for one release: each is an alias of its new module.

An old module (`roll_envs/four_choice.py`, `roll_envs/frozen_lake/__init__.py`, ...) calls `alias_module`,
which puts the new module in `sys.modules` under the old name, so `roll_envs.four_choice.FourChoiceEnv`
is the same class as `roll_envs.envs.four_choice.FourChoiceEnv` (monkeypatching and pickles agree). For a
package every submodule is aliased too, so `from roll_envs.frozen_lake.rules import move` keeps working.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

REMOVED_IN = "0.3.0"
"""The roll-envs release that drops the old paths."""


def alias_module(old: str, new: str) -> None:
    """Make the module being imported as `old` the module `new` (and `old.X` each submodule `new.X` of a
    package), warning once with a `DeprecationWarning` that names the new path."""
    # stacklevel 3: past this function and the old module, to the import statement (importlib's frames
    # are skipped by `warnings`).
    warnings.warn(
        f"{old} moved to {new}: import it from there ({old} goes away in roll-envs {REMOVED_IN}).",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)
    sys.modules[old] = module
    for info in pkgutil.walk_packages(getattr(module, "__path__", ()), prefix=f"{new}."):
        sys.modules[old + info.name.removeprefix(new)] = importlib.import_module(info.name)
