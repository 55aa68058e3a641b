"""Sokoban as text: push every box onto a target (gym-sokoban's rules and rewards, RAGEN's text grid)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from roll_envs.base import BASE_METRICS, ActionOutcome, Aggregation, BaseEnv
from roll_envs.config import EnvConfig
from roll_envs.errors import EnvConfigError
from roll_envs.sokoban.generator import Room, generate_room
from roll_envs.tiles import Color, Tile

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

    max_steps: int = Field(
        100, ge=1, le=100_000, description="turns (calls to step) before the episode is truncated"
    )
    format_penalty: float = Field(
        -WORST_MOVE_REWARD,
        ge=0.0,
        description="subtracted from the reward of a turn whose answer is not a valid action; the default "
        "1.1 makes garbage score as the worst move (a box pushed off a target), never better",
    )
    dim_x: int = Field(6, ge=4, le=20, description="grid width, walls included")
    dim_y: int = Field(6, ge=4, le=20, description="grid height, walls included")
    num_boxes: int = Field(1, ge=1, le=6, description="boxes (and targets)")
    search_depth: int = Field(100, ge=1, le=10_000, description="random moves of the reverse play per walk")
    grid_vocab: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_GRID), description=f"symbol of each of {', '.join(ROLES)}"
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


class SokobanEnv(BaseEnv):
    """Sokoban: walk with Up/Down/Left/Right, pushing boxes; solved when every box is on a target.

    Rewards (gym-sokoban's): -0.1 per move, +1 for a box pushed onto a target, -1 for a box pushed
    off one, +10 when the room is solved (which terminates the episode).
    `reset(options={"room": Room(...)})` plays a given room.
    """

    config_cls = SokobanConfig
    config: SokobanConfig
    metric_aggregation: ClassVar[Mapping[str, Aggregation]] = {**BASE_METRICS, "boxes_on_target": "last"}

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self.room: Room | None = None
        self.boxes: set[int] = set()
        self.player = 0
        self._wall_row_cache: list[list[str]] = []

    @property
    def instruction(self) -> str:
        """The system prompt, with this env's symbols."""
        g = self.config.grid_vocab
        multi = self.multi_action_hint("moves")
        return (
            "You are a Sokoban player. Push every box onto a target. You can push a box but not pull it, "
            "and you cannot push two boxes. "
            f"The map: {g['wall']} is a wall, {g['empty']} is floor, {g['target']} is a target, "
            f"{g['box']} is a box, {g['box_on_target']} is a box on a target, {g['player']} is you, "
            f"{g['player_on_target']} is you on a target. Moves: Up, Down, Left, Right.{multi} "
            "Answer with one move, like <answer>Left</answer>."
        )

    @property
    def valid_actions(self) -> list[str]:
        """Up, Down, Left, Right."""
        return list(ACTIONS)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Generate a room from `rng` by reverse play, or take `options["room"]`."""
        room = options.get("room")
        if room is None:
            cfg = self.config
            py_rng = random.Random(int(rng.integers(2**63)))
            room = generate_room(py_rng, cfg.dim_y, cfg.dim_x, cfg.num_boxes, cfg.search_depth)
        elif not isinstance(room, Room):
            raise EnvConfigError(f"sokoban: options['room'] must be a Room; got {type(room).__name__}.")
        self.room = room
        self.boxes = set(room.boxes)
        self.player = room.player

    def apply_action(self, action: str) -> ActionOutcome:
        """Move, pushing the box in front if the cell behind it is free floor."""
        room = self.room
        assert room is not None
        d = (-room.width, room.width, -1, 1)[ACTIONS.index(action)]
        nxt = self.player + d
        reward = STEP_PENALTY
        if nxt not in room.floor:
            return ActionOutcome(reward, False, False)
        if nxt in self.boxes:
            beyond = nxt + d
            if beyond not in room.floor or beyond in self.boxes:
                return ActionOutcome(reward, False, False)
            self.boxes.remove(nxt)
            self.boxes.add(beyond)
            reward += (beyond in room.targets) * BOX_ON_TARGET + (nxt in room.targets) * BOX_OFF_TARGET
        self.player = nxt
        solved = self.is_success()
        return ActionOutcome(reward + SOLVED_BONUS * solved, solved, True)

    def text_observation(self) -> str:
        """The grid, one row per line."""
        room = self.room
        assert room is not None
        g = self.config.grid_vocab
        cells = [g["wall"]] * (room.height * room.width)
        for f in room.floor:
            cells[f] = g["empty"]
        for t in room.targets:
            cells[t] = g["target"]
        for b in self.boxes:
            cells[b] = g["box_on_target"] if b in room.targets else g["box"]
        cells[self.player] = g["player_on_target"] if self.player in room.targets else g["player"]
        w = room.width
        return "\n".join("".join(cells[r * w : (r + 1) * w]) for r in range(room.height))

    def is_success(self) -> bool:
        """Every box on a target."""
        return self.room is not None and self.boxes == self.room.targets

    def episode_metrics(self) -> dict[str, float]:
        """`boxes_on_target` (aggregated with `last`)."""
        assert self.room is not None
        return {"boxes_on_target": float(len(self.boxes & self.room.targets))}

    def render_frame(self) -> np.ndarray:
        """Tiles: brick walls, floor, red target rings, crates (green on a target) and the player."""
        from roll_envs.tiles import tile_frame

        g = self.config.grid_vocab
        tiles = {g[role]: tile for role, tile in SOKOBAN_TILES.items()}
        return tile_frame(self.text_observation().split("\n"), tiles)


_FLOOR: Color = (236, 226, 200)
_TARGET: Color = (215, 60, 60)
_PLAYER: Color = (50, 90, 200)
SOKOBAN_TILES: dict[str, Tile] = {
    "wall": Tile((125, 85, 60), (("bricks", (90, 60, 42)),)),
    "empty": Tile(_FLOOR),
    "target": Tile(_FLOOR, (("ring", _TARGET),)),
    "box_on_target": Tile(_FLOOR, (("crate", (70, 175, 85)),)),
    "box": Tile(_FLOOR, (("crate", (205, 145, 55)),)),
    "player": Tile(_FLOOR, (("figure", _PLAYER),)),
    "player_on_target": Tile(_FLOOR, (("ring", _TARGET), ("figure", _PLAYER))),
}
"""How each grid role is drawn in frames (keyed by role, so every grid vocabulary looks the same)."""
