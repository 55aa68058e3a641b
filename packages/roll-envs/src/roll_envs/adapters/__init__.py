"""Adapters that play other env libraries' envs through roll: GEM, TextArena and reasoning-gym.

Each is one module behind an extra of roll-envs (`roll-envs[gem]`, `roll-envs[textarena]`,
`roll-envs[reasoning-gym]`) and registers an id prefix, so a library's env is named by its own id:
`gem:game:Minesweeper-v0-easy`, `textarena:TicTacToe-v0`, `reasoning_gym:basic_arithmetic`. The library
is imported on the first `make` of one of its ids; without the extra, that `make` says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from roll_envs.errors import EnvConfigError

__all__ = ["import_library"]


def import_library(module: str, extra: str) -> ModuleType:
    """Import an adapter's library, or raise `EnvConfigError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvConfigError(
            f"the {module!r} adapter needs its library, which does not import ({exc}). "
            f"Fix: install roll-envs[{extra}] (in this repository: uv sync, which installs every extra)."
        ) from exc
