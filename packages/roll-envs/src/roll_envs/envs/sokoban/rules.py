"""Sokoban's rules, without the env: the actions, the grid symbols, the rewards, the config and the room
that an episode's random stream draws.

`roll_envs.envs.sokoban.env` (the env) and `roll_envs.envs.sokoban.baselines` both build on this module, which
imports neither.
"""

from __future__ import annotations

import random

import numpy as np
from pydantic import Field, field_validator

from roll_envs.config import EnvConfig, turns_field
from roll_envs.envs.frozen_lake.rules import goal_offset
from roll_envs.envs.sokoban.generator import Room, generate_room, greedy_solvable
from roll_envs.errors import EnvConfigError

ACTIONS = ("Up", "Down", "Left", "Right")
"""Action names (ROLL's order: 1 Up, 2 Down, 3 Left, 4 Right, here indexed from 0)."""

ROLES = ("wall", "empty", "target", "box_on_target", "box", "player", "player_on_target")
"""What a grid symbol can stand for."""

DEFAULT_GRID = {
    "wall": "#",
    "empty": "_",
    "target": "O",
    "box_on_target": "√",
    "box": "X",
    "player": "P",
    "player_on_target": "S",
}
"""Symbols of the standard text grid."""

ALTERNATIVE_GRID = {
    "wall": "W",
    "empty": ".",
    "target": "T",
    "box_on_target": "*",
    "box": "B",
    "player": "A",
    "player_on_target": "+",
}
"""Symbols of SokobanDifferentGridVocab: the same game drawn with other characters."""

STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
SOLVED_BONUS = 10.0
WORST_MOVE_REWARD = STEP_PENALTY + BOX_OFF_TARGET
"""The lowest reward of one move (pushing a box off a target): -1.1."""


class SokobanConfig(EnvConfig):
    """Config of `SokobanEnv` (plus `max_steps`, `format_penalty`, `max_actions_per_turn`)."""

    max_steps: int = turns_field(100)
    format_penalty: float = Field(
        -WORST_MOVE_REWARD,
        ge=0.0,
        description="subtracted from the reward of a turn whose answer is not a valid action; the default "
        "1.1 makes garbage score as the worst move (a box pushed off a target), never better",
    )
    dim_x: int = Field(6, ge=4, le=20, description="grid width, walls included")
    dim_y: int = Field(6, ge=4, le=20, description="grid height, walls included")
    num_boxes: int = Field(1, ge=1, le=6, description="boxes (and targets)")
    search_depth: int = Field(
        100,
        ge=1,
        le=10_000,
        description="random moves of the reverse play per walk; above 1000 the env withdraws never_blocks",
    )
    grid_vocab: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_GRID), description=f"symbol of each of {', '.join(ROLES)}"
    )
    needs_detour: bool = Field(
        False,
        description="keep only rooms that pushes each bringing a box nearer its nearest target cannot solve"
        " (`greedy_solvable`): a box must first go sideways or away; about 1 room in 256 at 6x6 with one box,"
        " so a reset draws about 256 rooms (about 0.07 s of one core), and the env withdraws `never_blocks`",
    )
    describe: bool = Field(
        False,
        description="add a line in words under the grid: your row and column, each box's and target's (with"
        " the moves a lone box needs to reach its target), and what each move leads to (wall, floor, target,"
        " a push of a box and where it lands, or a blocked box); for models that cannot read a grid",
    )

    @field_validator("grid_vocab")
    @classmethod
    def _complete_and_distinct(cls, value: dict[str, str]) -> dict[str, str]:
        if set(value) != set(ROLES) or any(len(s) != 1 or s.isspace() for s in value.values()):
            raise ValueError(
                f"grid_vocab must map exactly {list(ROLES)} to single non-space characters; got {value!r}"
            )
        if len(set(value.values())) != len(ROLES):
            raise ValueError(f"grid_vocab symbols must be distinct; got {value!r}")
        return value


def deltas(width: int) -> tuple[int, int, int, int]:
    """The flat-index step of each move of `ACTIONS` in a room `width` cells wide."""
    return (-width, width, -1, 1)


def sokoban_description(room: Room, boxes: frozenset[int], player: int) -> str:
    """The state in words (rows and columns from 1, top-left): where you are, the boxes and targets (for one
    box off its target, the moves it needs: `goal_offset`), and what each move of `ACTIONS` leads to.

    >>> room = Room(4, 5, frozenset({6, 7, 8, 11, 12, 13}), frozenset({8}), frozenset({7}), 6)
    >>> sokoban_description(room, room.boxes, room.player)
    'You are at row 2, column 2. The box is at row 2, column 3, the target at row 2, column 4: the box must go Right 1. Up: wall, Down: floor, Left: wall, Right: push the box onto the target.'
    """
    w = room.width

    def place(cell: int) -> str:
        return f"row {cell // w + 1}, column {cell % w + 1}"

    def ground(cell: int) -> str:
        return "the target" if cell in room.targets else "floor"

    if len(boxes) == 1 and not boxes <= room.targets:
        (box,), (target,) = tuple(boxes), tuple(room.targets)
        offset = goal_offset(divmod(box, w), divmod(target, w))
        things = f"The box is at {place(box)}, the target at {place(target)}: the box must go {offset}."
    else:
        on = [f"{place(b)} (on a target)" if b in room.targets else place(b) for b in sorted(boxes)]
        free = [place(t) for t in sorted(room.targets - boxes)]
        things = f"Boxes at {'; '.join(on)}." + (f" Free targets at {'; '.join(free)}." if free else "")
    leads = []
    for name, d in zip(ACTIONS, deltas(w), strict=True):
        nxt = player + d
        if nxt not in room.floor:
            leads.append(f"{name}: wall")
        elif nxt not in boxes:
            leads.append(f"{name}: {ground(nxt)}")
        elif nxt + d in room.floor and nxt + d not in boxes:
            leads.append(f"{name}: push the box onto {ground(nxt + d)}")
        else:
            leads.append(f"{name}: a box that cannot move")
    return f"You are at {place(player)}. {things} {', '.join(leads)}."


DETOUR_DRAWS = 20_000
"""How many rooms a `needs_detour` reset draws at most before it gives up (at 1 in 256, never in practice)."""


SHORT_SEARCH_DEPTH = 1000
"""The deepest reverse play whose reset stays short: at most 6 ms of one core at 1000, but 52 ms at 10,000."""


def reset_can_hold_the_loop(config: SokobanConfig) -> bool:
    """Whether a reset under `config` can hold an event loop for tens of ms or more, so that `SokobanEnv` must not
    claim `never_blocks`: with `needs_detour` (a reset draws rooms until one needs a detour: 79 ms of one core
    on average, 0.53 s at worst over 500 seeds) or a `search_depth` above `SHORT_SEARCH_DEPTH`."""
    return config.needs_detour or config.search_depth > SHORT_SEARCH_DEPTH


def draw_room(rng: np.random.Generator, config: SokobanConfig) -> Room:
    """The room `SokobanEnv.reset` plays when it is given none: reverse play seeded by one draw from `rng`
    (the env's `np_random`), with the config's room generator settings; with `needs_detour`, the first room
    of that stream that `greedy_solvable` rejects."""
    py_rng = random.Random(int(rng.integers(2**63)))
    for _ in range(DETOUR_DRAWS if config.needs_detour else 1):
        room = generate_room(py_rng, config.dim_y, config.dim_x, config.num_boxes, config.search_depth)
        if not config.needs_detour or not greedy_solvable(room):
            return room
    raise EnvConfigError(
        f"sokoban: no room needing a detour in {DETOUR_DRAWS} draws of {config.dim_x}x{config.dim_y} with"
        f" {config.num_boxes} boxes; such rooms are rarer on this grid: set needs_detour=false or change the size."
    )
