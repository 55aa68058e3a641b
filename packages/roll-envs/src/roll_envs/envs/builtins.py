"""Registration of the built-in envs, in the roll registry and in Gymnasium's (`roll_envs/...-v0`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium

from roll_envs.adapters.gym import latest_gym_id
from roll_envs.envs.sokoban.rules import ALTERNATIVE_GRID
from roll_envs.registry import register, register_namespace

GYM_NAMESPACE = "roll_envs"
"""Gymnasium namespace of the built-ins: `gymnasium.make("roll_envs/FrozenLake-v0")`."""


@dataclass(frozen=True)
class Builtin:
    """One built-in registration: roll id, Gymnasium name ('' = not registered there), entry point, defaults."""

    id: str
    gym_name: str
    entry_point: str
    defaults: dict[str, Any]
    description: str


_FROZEN_LAKE = "roll_envs.envs.frozen_lake:FrozenLakeEnv"
_SOKOBAN = "roll_envs.envs.sokoban.env:SokobanEnv"
_ADAPTER = "roll_envs.adapters.gym:GymAdapterEnv"

# fmt: off
BUILTINS: tuple[Builtin, ...] = (
    Builtin("frozen_lake", "FrozenLake", _FROZEN_LAKE, {}, "FrozenLake 4x4, random map per seed, deterministic ice"),
    Builtin("sokoban", "Sokoban", _SOKOBAN, {}, "Sokoban, 6x6 room, 1 box (set dim_x, dim_y, num_boxes)"),
    Builtin("simple_sokoban", "SimpleSokoban", _SOKOBAN, {}, "Sokoban, 6x6 room, 1 box"),
    Builtin("larger_sokoban", "LargerSokoban", _SOKOBAN, {"dim_x": 8, "dim_y": 8, "num_boxes": 2},
            "Sokoban, 8x8 room, 2 boxes"),
    Builtin("sokoban_different_grid_vocab", "SokobanDifferentGridVocab", _SOKOBAN,
            {"grid_vocab": dict(ALTERNATIVE_GRID)}, "Sokoban 6x6, 1 box, drawn with other symbols"),
    Builtin("webshop_lite", "WebShopLite", "roll_envs.envs.webshop.env:WebShopLiteEnv", {},
            "WebShop-style shopping over a generated catalogue (not the original WebShop)"),
    Builtin("four_choice", "FourChoice", "roll_envs.envs.four_choice:FourChoiceEnv", {},
            "one turn: the right letter A-D for the colour shown (a contextual bandit)"),
    Builtin("tictactoe", "TicTacToe", "roll_envs.envs.tictactoe:TicTacToeEnv", {},
            "TicTacToe, two seats (X, O): self-play, or a seat played by random or minimax"),
    Builtin("sandbox", "Sandbox", "roll_envs.envs.sandbox:SandboxEnv", {},
            "tasks solved by running Python and shell in a sandbox: run_python, run_shell, submit"),
    Builtin("cliff_walking", "", _ADAPTER, {"gym_id": latest_gym_id("CliffWalking")},
            "Gymnasium CliffWalking through the text adapter"),
    Builtin("taxi", "", _ADAPTER, {"gym_id": latest_gym_id("Taxi")}, "Gymnasium Taxi through the text adapter"),
    Builtin("gym_adapter", "", _ADAPTER, {}, "any Gymnasium env with discrete actions (set gym_id)"),
)
# fmt: on
"""Every built-in env."""


def register_builtins() -> None:
    """Register every built-in env with roll_envs and with Gymnasium (idempotent)."""
    for b in BUILTINS:
        register(b.id, b.entry_point, defaults=b.defaults, description=b.description, override=True)
        gym_id = f"{GYM_NAMESPACE}/{b.gym_name}-v0"
        if b.gym_name and gym_id not in gymnasium.registry:
            gymnasium.register(gym_id, entry_point=b.entry_point, kwargs=dict(b.defaults))
    for prefix, entry_point, what in ADAPTER_NAMESPACES:
        register_namespace(prefix, entry_point, id_field="env_id", description=what, override=True)


ADAPTER_NAMESPACES = (
    (
        "gem",
        "roll_envs.adapters.gem:GemEnv",
        "any GEM env, e.g. gem:game:Minesweeper-v0-easy (roll-envs[gem])",
    ),
    (
        "textarena",
        "roll_envs.adapters.textarena:TextArenaEnv",
        "any TextArena env, e.g. textarena:TicTacToe-v0 (roll-envs[textarena])",
    ),
    (
        "reasoning_gym",
        "roll_envs.adapters.reasoning_gym:ReasoningGymEnv",
        "any reasoning-gym dataset, e.g. reasoning_gym:basic_arithmetic (roll-envs[reasoning-gym])",
    ),
)
"""(prefix, entry point, description) of the library adapters; each imports its library on first make."""
