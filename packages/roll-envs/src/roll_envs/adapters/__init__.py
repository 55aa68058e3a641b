"""Adapters that play other env libraries' envs through roll: Gymnasium, GEM, TextArena and reasoning-gym.

`gym.py` wraps any Gymnasium env with discrete actions (gymnasium is a dependency of roll-envs; the
built-ins `cliff_walking`, `taxi` and `gym_adapter` use it). The others are each behind an extra of
roll-envs (`roll-envs[gem]`, `roll-envs[textarena]`, `roll-envs[reasoning-gym]`) and register an id prefix,
so a library's env is named by its own id: `gem:game:Minesweeper-v0-easy`, `textarena:TicTacToe-v0`,
`reasoning_gym:basic_arithmetic`. The library is imported on the first `make` of one of its ids; without
the extra, that `make` says what to install.

Modules:
    gym.py             `GymAdapterEnv`: a Gymnasium env with discrete actions as a text env
    gem.py             `GemEnv`: GEM envs (`gem:<id>`, `\\boxed{}` answers)
    textarena.py       `TextArenaEnv`: TextArena games (`textarena:<id>`), other seats random
    reasoning_gym.py   `ReasoningGymEnv`: reasoning-gym datasets (`reasoning_gym:<name>`)
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
