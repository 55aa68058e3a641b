"""FrozenLake as text: reach the goal across a frozen lake without falling into a hole.

Maps follow RAGEN's FrozenLake: each seed draws a new `size` x `size` board whose cells are frozen
with probability `p`, a random start and a distinct random goal, redrawn until a path joins them.
Moves, rewards and terminations are those of Gymnasium's FrozenLake-v1 on the same map (slippery
ice included, with the same random-number use), so `gymnasium.make("FrozenLake-v1", desc=...)`
is an independent check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig
from roll_envs.errors import EnvConfigError
from roll_envs.tiles import Color, Tile

ACTIONS = ("Left", "Down", "Right", "Up")
"""Action names in Gymnasium's index order (0 left, 1 down, 2 right, 3 up)."""

_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))
_MAX_MAP_ATTEMPTS = 10_000


class FrozenLakeConfig(EnvConfig):
    """Config of `FrozenLakeEnv` (plus `max_steps`, `format_penalty`, `max_actions_per_turn`)."""

    size: int = Field(4, ge=2, le=32, description="the board is size x size")
    p: float = Field(
        0.8, gt=0.0, le=1.0, description="probability that a generated cell is frozen (not a hole)"
    )
    is_slippery: bool = Field(False, description="Gymnasium's slippery ice: the move may go sideways")
    success_rate: float = Field(
        1.0 / 3.0,
        ge=0.0,
        le=1.0,
        description="with slippery ice, probability of moving in the intended direction",
    )
    hole_penalty: float = Field(
        0.0,
        ge=0.0,
        description="subtracted from the reward of the move that falls into a hole (Gymnasium's: 0, the"
        " same as wandering until the turn limit); a penalty makes every move into a hole a lesson",
    )


def generate_map(rng: np.random.Generator, size: int = 4, p: float = 0.8) -> list[str]:
    """A random board as rows of `S` start, `F` frozen, `H` hole, `G` goal, with a path from S to G."""
    for _ in range(_MAX_MAP_ATTEMPTS):
        frozen = rng.random((size, size)) < p
        start = int(rng.integers(size * size))
        goal = int(rng.integers(size * size - 1))
        goal += goal >= start  # a goal distinct from the start, uniformly
        board = [["F" if cell else "H" for cell in row] for row in frozen.tolist()]
        board[start // size][start % size] = "S"
        board[goal // size][goal % size] = "G"
        if has_path(board, start, goal):
            return ["".join(row) for row in board]
    raise EnvConfigError(
        f"frozen_lake: no valid {size}x{size} map in {_MAX_MAP_ATTEMPTS} draws with p={p}; "
        "raise p (the probability that a cell is frozen)."
    )


def has_path(board: list[list[str]], start: int, goal: int) -> bool:
    """Whether the goal is reachable from the start over non-hole cells (4-connected)."""
    size = len(board)
    seen = {start}
    stack = [start]
    while stack:
        cell = stack.pop()
        if cell == goal:
            return True
        row, col = divmod(cell, size)
        for dr, dc in _MOVES:
            r, c = row + dr, col + dc
            if 0 <= r < size and 0 <= c < size and board[r][c] != "H":
                nxt = r * size + c
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    return False


def move(desc: list[str], position: int, action: int) -> int:
    """Gymnasium's deterministic move: one cell in the direction, staying put at the border."""
    nrow, ncol = len(desc), len(desc[0])
    row, col = divmod(position, ncol)
    dr, dc = _MOVES[action]
    return min(max(row + dr, 0), nrow - 1) * ncol + min(max(col + dc, 0), ncol - 1)


class FrozenLakeEnv(BaseEnv):
    """FrozenLake: `P` you, `_` ice, `O` hole, `G` goal, `X` you in a hole, `√` you on the goal.

    Reward 1 on reaching the goal, minus `hole_penalty` (default 0) on falling into a hole, else 0; the
    episode terminates in a hole or on the goal and is truncated after `max_steps` turns. `reset(options={"map": ["SFF", "FHF", "FFG"]})` plays a given map.

    >>> env = FrozenLakeEnv()
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("<answer>Left</answer>")
    >>> sorted(k for k in info if k.startswith("action_is"))
    ['action_is_effective', 'action_is_valid']
    """

    config_cls = FrozenLakeConfig
    config: FrozenLakeConfig

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self.desc: list[str] = []
        self.position = 0

    @property
    def instruction(self) -> str:
        """The system prompt (about 60 words)."""
        multi = self.multi_action_hint("moves")
        slip = " The ice is slippery: you may slide sideways." if self.config.is_slippery else ""
        return (
            "You are walking on a frozen lake. Reach the goal G and do not fall into a hole O. "
            "The map: P is you, _ is ice, O is a hole, G is the goal. "
            f"Moves: Left, Down, Right, Up. A move into the edge does nothing.{slip}{multi} "
            "Answer with one move, like <answer>Left</answer>."
        )

    @property
    def valid_actions(self) -> list[str]:
        """Left, Down, Right, Up."""
        return list(ACTIONS)

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Draw a map from `rng`, or take `options["map"]` (rows of S/F/H/G)."""
        if "map" in options:
            self.desc = _checked_map(options["map"])
        else:
            self.desc = generate_map(rng, self.config.size, self.config.p)
        flat = "".join(self.desc)
        self.position = flat.index("S")

    def apply_action(self, action: str) -> ActionOutcome:
        """Gymnasium's FrozenLake-v1 transition for one move."""
        letter = self._letter(self.position)
        if letter in "GH":
            return ActionOutcome(0.0, True, False)
        a = ACTIONS.index(action)
        if self.config.is_slippery:
            a = self._slip(a)
        new = move(self.desc, self.position, a)
        effective = new != self.position
        self.position = new
        letter = self._letter(new)
        reward = 1.0 if letter == "G" else -self.config.hole_penalty if letter == "H" else 0.0
        return ActionOutcome(reward, letter in "GH", effective)

    def text_observation(self) -> str:
        """The board, one row per line."""
        ncol = len(self.desc[0])
        row, col = divmod(self.position, ncol)
        lines = []
        for r, line in enumerate(self.desc):
            cells = ["O" if ch == "H" else "G" if ch == "G" else "_" for ch in line]
            if r == row:
                here = line[col]
                cells[col] = "X" if here == "H" else "√" if here == "G" else "P"
            lines.append("".join(cells))
        return "\n".join(lines)

    def is_success(self) -> bool:
        """On the goal."""
        return bool(self.desc) and self._letter(self.position) == "G"

    def render_frame(self) -> np.ndarray:
        """Tiles: ice, holes, the goal's flag and the player (a cross in a hole, on green at the goal)."""
        from roll_envs.tiles import tile_frame

        return tile_frame(self.text_observation().split("\n"), FROZEN_LAKE_TILES)

    def _letter(self, position: int) -> str:
        ncol = len(self.desc[0])
        return self.desc[position // ncol][position % ncol]

    def _slip(self, action: int) -> int:
        """Gymnasium's categorical draw over [(a-1)%4, a, (a+1)%4] with one `random()` per move."""
        succ = self.config.success_rate
        fail = (1.0 - succ) / 2.0
        u = self.np_random.random()
        if fail > u:
            return (action - 1) % 4
        if fail + succ > u:
            return action
        if fail + succ + fail > u:
            return (action + 1) % 4
        return (action - 1) % 4  # np.argmax of an all-False mask is 0, as in categorical_sample


_ICE: Color = (214, 236, 250)
_HOLE: Color = (28, 52, 100)
_GOAL: Color = (46, 170, 70)
_PLAYER: Color = (225, 75, 55)
FROZEN_LAKE_TILES: dict[str, Tile] = {
    "_": Tile(_ICE),
    "O": Tile(_ICE, (("hole", _HOLE),)),
    "G": Tile(_ICE, (("flag", _GOAL),)),
    "P": Tile(_ICE, (("figure", _PLAYER),)),
    "X": Tile(_ICE, (("hole", _HOLE), ("cross", _PLAYER))),
    "√": Tile((150, 225, 140), (("flag", _GOAL), ("figure", _PLAYER))),
}
"""How each symbol of the FrozenLake text grid is drawn in frames."""


def _checked_map(rows: Any) -> list[str]:
    if (
        not isinstance(rows, list | tuple)
        or not rows
        or not all(isinstance(r, str) and len(r) == len(rows[0]) > 0 for r in rows)
        or not set("".join(rows)) <= set("SFHG")
        or "".join(rows).count("S") != 1
    ):
        raise EnvConfigError(
            f"frozen_lake: options['map'] must be equal-length rows of S/F/H/G with exactly one S; got {rows!r}."
        )
    return list(rows)
