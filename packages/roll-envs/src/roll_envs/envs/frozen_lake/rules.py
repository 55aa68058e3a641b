"""FrozenLake's rules, without the env: the actions and their moves, the config, map generation, and
what lies next to the player on a text board.

Maps follow RAGEN's FrozenLake: each seed draws a new `size` x `size` board whose cells are frozen
with probability `p`, a random start and a distinct random goal, redrawn until a path joins them.
`roll_envs.envs.frozen_lake.env` (the env) and `roll_envs.envs.frozen_lake.baselines` both build on this
module, which imports neither.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from roll_envs.config import EnvConfig
from roll_envs.errors import EnvConfigError

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


def frozen_lake_neighbours(board: str) -> str | None:
    """What lies next to P on a FrozenLake text board, e.g. `Left _ Down O Right edge Up G`; None without P.

    `board` is the env's text observation (rows joined by newlines); each move of `ACTIONS`, in that
    order, names the symbol of the cell it leads to, or `edge` off the board.

    >>> frozen_lake_neighbours("_O\\nPG")
    'Left edge Down edge Right G Up _'
    >>> frozen_lake_neighbours("_X\\n_G") is None
    True
    """
    rows = board.split("\n")
    here = next(((r, row.index("P")) for r, row in enumerate(rows) if "P" in row), None)
    if here is None:
        return None
    parts = []
    for name, (dr, dc) in zip(ACTIONS, _MOVES, strict=True):
        r, c = here[0] + dr, here[1] + dc
        inside = 0 <= r < len(rows) and 0 <= c < len(rows[r])
        parts.append(f"{name} {rows[r][c] if inside else 'edge'}")
    return " ".join(parts)
