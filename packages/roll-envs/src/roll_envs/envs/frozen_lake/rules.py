"""FrozenLake's rules, without the env: the actions and their moves, the config, map generation, shortest
paths, and what a text board shows (what lies next to the player, the board in words).

Maps follow RAGEN's FrozenLake: each seed draws a new `size` x `size` board whose cells are frozen
with probability `p`, a random start and a distinct random goal, redrawn until a path joins them.
`roll_envs.envs.frozen_lake.env` (the env) and `roll_envs.envs.frozen_lake.baselines` both build on this
module, which imports neither.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from roll_envs.config import EnvConfig
from roll_envs.errors import EnvConfigError

ACTIONS = ("Left", "Down", "Right", "Up")
"""Action names in Gymnasium's index order (0 left, 1 down, 2 right, 3 up)."""

_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))
_MAX_MAP_ATTEMPTS = 10_000

_BOARD_SYMBOLS = frozenset("_OGPX√")
"""The symbols of a text board: ice, hole, goal, you, you in a hole, you on the goal."""

_CELL_WORDS = {"_": "ice", "O": "hole", "G": "goal"}


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
        " same as wandering until the turn limit); a penalty makes every move into a hole a lesson, and standing"
        " still (a move into the edge, an answer that is no move) safer than trying: SmolLM2 learnt both",
    )
    describe: bool = Field(
        False,
        description="add a line in words under the board: your row and column, the goal's, and what each"
        " move leads to (ice, hole, goal, edge); a rendering of the board for models that cannot read a grid",
    )
    offset_cells: bool = Field(
        False,
        description="with describe: each direction of the goal's offset also names the cell its move leads to"
        " (`Down 1 (ice), Left 1 (hole)`), beside the direction as well as in the list of moves after it;"
        " cloned SmolLM2-135M still walked into the hole of its first offset direction with it"
        " (examples/smollm2-cpu-agentic/README.md)",
    )
    demonstrator: Literal["shortest_path", "description_rule"] = Field(
        "shortest_path",
        description="what `demonstration()` answers: the first move of a shortest path (it reads the whole board),"
        " or with describe the move of `description_rule` (it reads only the line, so a model that reads only the"
        " line can copy every move of it; the shortest path's move is the rule's on 84% of the turns of 2,000 maps)",
    )
    needs_sidestep: bool = Field(
        False,
        description="draw only maps on which walking towards the goal's row first, then its column, falls into a"
        " hole (`row_first_walk_falls`), so that the way to the goal steps sideways at a hole: 30 of the 128"
        " validation maps of the SmolLM2 recipes, 245 of 1,000 held-out ones (4x4, p 0.8). A training set of the boards such a walk loses (the walk a"
        " cloned SmolLM2 plays); validate on the default maps",
    )

    @model_validator(mode="after")
    def _line_options_need_describe(self) -> FrozenLakeConfig:
        if self.offset_cells and not self.describe:
            raise ValueError(
                "offset_cells names cells in the line in words, which only describe=True adds."
                " Fix: set describe: true, or drop offset_cells"
            )
        if self.demonstrator == "description_rule" and not self.describe:
            raise ValueError(
                "demonstrator description_rule reads the line in words, which only describe=True adds."
                " Fix: set describe: true, or demonstrator: shortest_path"
            )
        return self


def generate_map(
    rng: np.random.Generator, size: int = 4, p: float = 0.8, needs_sidestep: bool = False
) -> list[str]:
    """A random board as rows of `S` start, `F` frozen, `H` hole, `G` goal, with a path from S to G; with
    `needs_sidestep`, also one on which `row_first_walk_falls` (boards are drawn until one is)."""
    for _ in range(_MAX_MAP_ATTEMPTS):
        frozen = rng.random((size, size)) < p
        start = int(rng.integers(size * size))
        goal = int(rng.integers(size * size - 1))
        goal += goal >= start  # a goal distinct from the start, uniformly
        board = [["F" if cell else "H" for cell in row] for row in frozen.tolist()]
        board[start // size][start % size] = "S"
        board[goal // size][goal % size] = "G"
        if has_path(board, start, goal) and (not needs_sidestep or row_first_walk_falls(board, start, goal)):
            return ["".join(row) for row in board]
    sidestep = " and needs_sidestep (set it false)" if needs_sidestep else ""
    raise EnvConfigError(
        f"frozen_lake: no valid {size}x{size} map in {_MAX_MAP_ATTEMPTS} draws with p={p}{sidestep}; "
        "raise p (the probability that a cell is frozen)."
    )


def row_first_walk_falls(board: Sequence[Sequence[str]], start: int, goal: int) -> bool:
    """Whether the walk from `start` towards the goal's row first, then towards its column, one cell a move,
    enters a hole before the goal.

    >>> row_first_walk_falls(["SF", "HG"], 0, 3)
    True
    >>> row_first_walk_falls(["SH", "FG"], 0, 3)
    False
    """
    ncol = len(board[0])
    (row, col), (goal_row, goal_col) = divmod(start, ncol), divmod(goal, ncol)
    while (row, col) != (goal_row, goal_col):
        if row != goal_row:
            row += 1 if goal_row > row else -1
        else:
            col += 1 if goal_col > col else -1
        if board[row][col] == "H":
            return True
    return False


def has_path(board: Sequence[Sequence[str]], start: int, goal: int) -> bool:
    """Whether the goal is reachable from the start without entering a hole (4-connected)."""
    return _first_shortest_path(board, start, {goal}) is not None


def shortest_path_moves(desc: Sequence[Sequence[str]], position: int) -> list[str] | None:
    """The moves of a shortest path from `position` to a goal `G` that enters no hole, with deterministic
    moves; of several, the first in `ACTIONS` order (Left before Down before Right before Up at the first
    move that differs). [] on a goal, None when no goal can be reached (or from a hole).

    >>> shortest_path_moves(["SH", "FG"], 0)
    ['Down', 'Right']
    >>> shortest_path_moves(["SF", "FG"], 0)
    ['Down', 'Right']
    >>> shortest_path_moves(["SH", "HG"], 0) is None
    True
    """
    ncol = len(desc[0])
    goals = {r * ncol + c for r, row in enumerate(desc) for c, cell in enumerate(row) if cell == "G"}
    path = _first_shortest_path(desc, position, goals)
    return None if path is None else [ACTIONS[a] for a in path]


def _first_shortest_path(
    desc: Sequence[Sequence[str]], start: int, targets: Collection[int]
) -> list[int] | None:
    """Breadth-first search over `move`: the action indices of a shortest path from `start` to a cell of
    `targets`, or None. Holes and goals end an episode, so no path leaves one. Expanding cells in queue
    order and moves in `ACTIONS` order, the first path found to a cell is the first of its shortest ones
    in that order."""
    if start in targets:
        return []
    flat = "".join("".join(row) for row in desc)
    parents: dict[int, tuple[int, int]] = {start: (start, -1)}
    queue = deque([start] if flat[start] not in "HG" else [])
    while queue:
        cell = queue.popleft()
        for action in range(len(ACTIONS)):
            nxt = move(desc, cell, action)
            if nxt in parents:  # seen at this depth or less (a move into the edge stays on `cell`)
                continue
            parents[nxt] = (cell, action)
            if nxt in targets:
                return _unwind(parents, nxt)
            if flat[nxt] not in "HG":
                queue.append(nxt)
    return None


def _unwind(parents: dict[int, tuple[int, int]], cell: int) -> list[int]:
    """The actions leading to `cell` through its chain of BFS parents."""
    actions: list[int] = []
    while parents[cell][1] >= 0:
        cell, action = parents[cell]
        actions.append(action)
    return actions[::-1]


def move(desc: Sequence[Sequence[str]], position: int, action: int) -> int:
    """Gymnasium's deterministic move: one cell in the direction, staying put at the border."""
    ncol = len(desc[0])
    row, col = divmod(position, ncol)
    dr, dc = _MOVES[action]
    row, col = row + dr, col + dc
    return row * ncol + col if 0 <= row < len(desc) and 0 <= col < ncol else position


def frozen_lake_neighbours(board: str) -> str | None:
    """What lies next to P on a FrozenLake text board, e.g. `Left _ Down O Right edge Up G`; None without P.

    `board` is the env's text observation (rows joined by newlines; a described observation's line in
    words is not read); each move of `ACTIONS`, in that order, names the symbol of the cell it leads to, or
    `edge` off the board.

    >>> frozen_lake_neighbours("_O\\nPG")
    'Left edge Down edge Right G Up _'
    >>> frozen_lake_neighbours("_X\\n_G") is None
    True
    """
    rows = _board_rows(board)
    here = _find(rows, "P")
    if here is None:
        return None
    return " ".join(f"{name} {symbol}" for name, symbol in _neighbours(rows, here))


def frozen_lake_description(board: str, offset_cells: bool = False) -> str | None:
    """The board in words: where you are (rows and columns from 1, top-left), where the goal is and how
    many moves of each direction away (`goal_offset`; with `offset_cells`, each direction with the cell its
    move leads to), and what each move of `ACTIONS` leads to; once the episode ended, where it ended. None
    without a player symbol.

    >>> frozen_lake_description("_O\\nPG")
    'You are at row 2, column 1. The goal is at row 2, column 2: Right 1. Left: edge, Down: edge, Right: goal, Up: ice.'
    >>> frozen_lake_description("P_\\nOG", offset_cells=True)
    'You are at row 1, column 1. The goal is at row 2, column 2: Down 1 (hole), Right 1 (ice). Left: edge, Down: hole, Right: ice, Up: edge.'
    >>> frozen_lake_description("_X\\n_G")
    'You fell into a hole at row 1, column 2. The goal is at row 2, column 2.'
    >>> frozen_lake_description("__\\n_√")
    'You reached the goal at row 2, column 2.'
    """
    rows = _board_rows(board)
    goal = _find(rows, "G")
    goal_text = "" if goal is None else f" The goal is at {_place(goal)}."
    if (here := _find(rows, "P")) is not None:
        cells = {name: _CELL_WORDS.get(symbol, symbol) for name, symbol in _neighbours(rows, here)}
        if goal is not None:
            goal_text = (
                f" The goal is at {_place(goal)}: {goal_offset(here, goal, cells if offset_cells else None)}."
            )
        moves = ", ".join(f"{name}: {cell}" for name, cell in cells.items())
        return f"You are at {_place(here)}.{goal_text} {moves}."
    if (here := _find(rows, "X")) is not None:
        return f"You fell into a hole at {_place(here)}.{goal_text}"
    if (here := _find(rows, "√")) is not None:
        return f"You reached the goal at {_place(here)}."
    return None


def goal_offset(here: tuple[int, int], goal: tuple[int, int], cells: Mapping[str, str] | None = None) -> str:
    """The goal's offset from `here` (row, column) as moves, the vertical one first, named as `ACTIONS`
    names them, so that a model can match the direction to the move that takes it: `Down 3, Left 1`; with
    `cells` (a move's name -> what it leads to), each followed by its cell: `Down 3 (ice), Left 1 (hole)`.

    >>> goal_offset((0, 2), (3, 1))
    'Down 3, Left 1'
    >>> goal_offset((2, 0), (0, 0))
    'Up 2'
    >>> goal_offset((2, 0), (0, 0), {"Up": "goal"})
    'Up 2 (goal)'
    """
    rows, cols = goal[0] - here[0], goal[1] - here[1]
    parts = [("Down" if rows > 0 else "Up", abs(rows))] if rows else []
    parts += [("Right" if cols > 0 else "Left", abs(cols))] if cols else []
    return ", ".join(f"{name} {n}" + (f" ({cells[name]})" if cells else "") for name, n in parts)


def _board_rows(board: str) -> list[str]:
    """The board's rows: the leading lines made of board symbols only (a line in words has spaces)."""
    return list(
        itertools.takewhile(lambda line: bool(line) and set(line) <= _BOARD_SYMBOLS, board.split("\n"))
    )


def _find(rows: list[str], symbol: str) -> tuple[int, int] | None:
    """(row, column) of the first `symbol` on the board, from 0; None when absent."""
    return next(((r, row.index(symbol)) for r, row in enumerate(rows) if symbol in row), None)


def _neighbours(rows: list[str], here: tuple[int, int]) -> list[tuple[str, str]]:
    """Each move of `ACTIONS` with the symbol of the cell it leads to from `here`, or `edge` off the board."""
    parts = []
    for name, (dr, dc) in zip(ACTIONS, _MOVES, strict=True):
        r, c = here[0] + dr, here[1] + dc
        inside = 0 <= r < len(rows) and 0 <= c < len(rows[r])
        parts.append((name, rows[r][c] if inside else "edge"))
    return parts


def _place(cell: tuple[int, int]) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"
