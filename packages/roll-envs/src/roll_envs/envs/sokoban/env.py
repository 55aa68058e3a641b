"""Sokoban as text: push every box onto a target (gym-sokoban's rules and rewards, RAGEN's text grid)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, ClassVar

import numpy as np

from roll_envs.base import BASE_METRICS, ActionOutcome, Aggregation, BaseEnv
from roll_envs.baseline_types import EnvBaselines, scored_seeds
from roll_envs.envs.frozen_lake.baselines import played_success
from roll_envs.envs.sokoban.baselines import (
    FIXED_SEARCH_MOVES,
    fixed_sequence_baseline,
    room_graph,
    sokoban_baselines,
)
from roll_envs.envs.sokoban.generator import Room
from roll_envs.envs.sokoban.push_rule import push_rule
from roll_envs.envs.sokoban.rules import (
    ACTIONS,
    ALTERNATIVE_GRID,
    BOX_OFF_TARGET,
    BOX_ON_TARGET,
    DEFAULT_GRID,
    ROLES,
    SOLVED_BONUS,
    STEP_PENALTY,
    WORST_MOVE_REWARD,
    SokobanConfig,
    deltas,
    draw_room,
    reset_can_hold_the_loop,
    sokoban_description,
)
from roll_envs.errors import EnvConfigError
from roll_envs.tiles import Color, Tile

__all__ = [
    "ACTIONS",
    "ALTERNATIVE_GRID",
    "BOX_OFF_TARGET",
    "BOX_ON_TARGET",
    "DEFAULT_GRID",
    "ROLES",
    "SOKOBAN_TILES",
    "SOLVED_BONUS",
    "STEP_PENALTY",
    "WORST_MOVE_REWARD",
    "SokobanConfig",
    "SokobanEnv",
]


class SokobanEnv(BaseEnv):
    """Sokoban: walk with Up/Down/Left/Right, pushing boxes; solved when every box is on a target.

    Rewards (gym-sokoban's): -0.1 per move, +1 for a box pushed onto a target, -1 for a box pushed
    off one, +10 when the room is solved (which terminates the episode).
    `reset(options={"room": Room(...)})` plays a given room. With `describe`, a line in words follows the
    grid (`sokoban_description`); `demonstration()` gives the first move of a shortest solution.
    `never_blocks` holds unless a reset can hold the event loop (`reset_can_hold_the_loop`: `needs_detour` or
    a deep `search_depth`), where the instance withdraws it.
    """

    config_cls = SokobanConfig
    owns_random_state = True  # draws only from the episode rng (np_random and generators seeded from it)
    never_blocks = True  # in-memory game logic: a step is microseconds, never waits; a reset see __init__
    config: SokobanConfig
    metric_aggregation: ClassVar[Mapping[str, Aggregation]] = {**BASE_METRICS, "boxes_on_target": "last"}
    room: Room | None = None  # the state before the first reset; each reset sets it on the instance
    boxes: set[int]  # read only with a room
    player: int = 0

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        if reset_can_hold_the_loop(self.config):
            self.never_blocks = False  # this instance withdraws the class's hint (roll_envs.hints)

    @property
    def instruction(self) -> str:
        """The system prompt, with this env's symbols."""
        g = self.config.grid_vocab
        multi = self.multi_action_hint("moves")
        line = (
            " Below the map, a line says where you, the boxes and the targets are and what each move leads to."
            if self.config.describe
            else ""
        )
        return (
            "You are a Sokoban player. Push every box onto a target. You can push a box but not pull it, "
            "and you cannot push two boxes. "
            f"The map: {g['wall']} is a wall, {g['empty']} is floor, {g['target']} is a target, "
            f"{g['box']} is a box, {g['box_on_target']} is a box on a target, {g['player']} is you, "
            f"{g['player_on_target']} is you on a target.{line} Moves: Up, Down, Left, Right.{multi} "
            f"Answer with one move, like {self.format_answer('Left')}."
        )

    @property
    def valid_actions(self) -> list[str]:
        """Up, Down, Left, Right."""
        return list(ACTIONS)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Generate a room from `rng` by reverse play, or take `options["room"]`."""
        room = options.get("room")
        if room is None:
            room = draw_room(rng, self.config)
        elif not isinstance(room, Room):
            raise EnvConfigError(f"sokoban: options['room'] must be a Room; got {type(room).__name__}.")
        self.room = room
        self.boxes = set(room.boxes)
        self.player = room.player

    def apply_action(self, action: str) -> ActionOutcome:
        """Move, pushing the box in front if the cell behind it is free floor."""
        room = self.room
        assert room is not None
        d = deltas(room.width)[ACTIONS.index(action)]
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
        """The grid, one row per line; with `describe`, then the state in words (`sokoban_description`)."""
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
        grid = "\n".join("".join(cells[r * w : (r + 1) * w]) for r in range(room.height))
        if not self.config.describe:
            return grid
        return f"{grid}\n{sokoban_description(room, frozenset(self.boxes), self.player)}"

    def demonstration(self) -> str | None:
        """The first move of a shortest solution from the current state (`room_graph`: breadth-first over
        (player, boxes), ties in `ACTIONS` order), as an answer; None once the episode ended (solved or
        after `max_steps` turns) or when no solution is left (a box pushed into a dead end)."""
        room = self.room
        if room is None or self.is_success() or self.elapsed_steps >= self.config.max_steps:
            return None
        here = Room(room.height, room.width, room.floor, room.targets, frozenset(self.boxes), self.player)
        solution = room_graph(here).solution
        return self.format_answer(solution[0]) if solution else None

    def is_success(self) -> bool:
        """Every box on a target."""
        return self.room is not None and self.boxes == self.room.targets

    def episode_metrics(self) -> dict[str, float]:
        """`boxes_on_target` (aggregated with `last`)."""
        assert self.room is not None
        return {"boxes_on_target": float(len(self.boxes & self.room.targets))}

    def baselines(self, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None) -> EnvBaselines:
        """`random`, the best fixed sequence (`fixed_sequence_baseline`) and `optimal` (`sokoban_baselines`) on rooms of this config's
        generator settings, those of `seeds` (None: `episodes` seeds from `HELD_OUT_SEED_START`), and
        `push_rule` played on a copy of this env."""
        played = scored_seeds(episodes, seeds)
        found = sokoban_baselines(len(played), turns, self.config, seeds)
        fixed, fixed_success = fixed_sequence_baseline(len(played), turns, self.config, seeds)
        rates = {"random": found.pop("random"), fixed: fixed_success}
        player = SokobanEnv(self.config, render_mode=None)
        rates["push_rule"] = played_success(
            player, partial(push_rule, grid_vocab=self.config.grid_vocab), played, turns
        )
        rates["optimal"] = found.pop("optimal")
        note = (
            f"Shortest solutions (BFS) take {found['optimal_moves_mean']:.1f} moves on average, "
            f"at most {found['optimal_moves_max']:.0f}; the cap is {turns} turns. push_rule: the push of a box"
            " nearest the player that brings it nearer a target (else any), never into a corner."
        )
        if fixed != "best_fixed_sequence":
            note += f" {fixed}: the best fixed sequence of {FIXED_SEARCH_MOVES} moves (searched no longer)."
        return EnvBaselines("Sokoban", "rooms", turns, rates, note, found, played)

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
