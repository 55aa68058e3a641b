"""Reference numbers on Sokoban that a trained agent is judged against, exact on held-out rooms.

- `random`: a uniformly random move each turn. Its success within the turn cap is computed exactly, by
  dynamic programming over the room's (player, boxes) states (a 6x6 one-box room has at most a few
  hundred).
- `best_fixed_sequence`: the one move sequence, played whatever the room, that solves the most of these
  very rooms (exact search, `fixed_sequence_success`): the best a policy blind to the room does.
- `optimal`: the shortest solution of each room, found by breadth-first search over the same states.
  Its success within the cap is the fraction of rooms solvable in at most `turns` moves (1.0 when the
  cap is at least the longest shortest solution); `optimal_moves_mean` / `optimal_moves_max` say how
  long those solutions are.

Rooms are the ones `SokobanEnv.reset(seed=s)` plays, for the seeds given (a run's validation seeds), else
for the seeds from `HELD_OUT_SEED_START`; one move per turn (the default `max_actions_per_turn` of 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
from gymnasium.utils import seeding

from roll_envs.baseline_types import scored_seeds
from roll_envs.config import build_config
from roll_envs.envs.frozen_lake.baselines import best_fixed_sequence, sequence_success
from roll_envs.envs.sokoban.generator import Room
from roll_envs.envs.sokoban.rules import ACTIONS, SokobanConfig, deltas, draw_room


class RoomGraph(NamedTuple):
    """Every state reachable from a room's start, in breadth-first order (state 0 is the start)."""

    table: np.ndarray
    """(S, 4) int: the state after each move of `ACTIONS`; a blocked move and every solved state stay put."""
    solved: np.ndarray
    """(S,) bool: every box on a target."""
    solution: tuple[str, ...] | None
    """A shortest move sequence that solves the room; None when no reachable state is solved."""


def room_graph(room: Room) -> RoomGraph:
    """Breadth-first search from the room's start over (player, boxes), with each state's successors.

    The rules are the env's: a move into a box pushes it when the cell behind is floor without a box;
    any other blocked move leaves the state unchanged. Solved states are absorbing (the env ends there).

    >>> from roll_envs.envs.sokoban import SokobanEnv
    >>> env = SokobanEnv()
    >>> _ = env.reset(seed=0)
    >>> graph = room_graph(env.room)
    >>> graph.table.shape[1], bool(graph.solved[0])
    (4, False)
    """
    w, cells = room.width, room.width * room.height
    floor = [c in room.floor for c in range(cells)]
    steps = deltas(w)
    goal = sum(1 << t for t in room.targets)
    # a state is one int: the boxes as a bit mask over cells, shifted past the player's cell
    start = sum(1 << b for b in room.boxes) * cells + room.player
    index = {start: 0}
    states = [start]
    parent: list[tuple[int, int]] = [(-1, -1)]
    rows: list[list[int]] = []
    solved: list[bool] = []
    first_solved = -1
    for i, state in enumerate(states):  # the list grows while it is read: breadth-first order
        boxes, player = divmod(state, cells)
        row = [i] * 4
        rows.append(row)
        solved.append(boxes == goal)
        if boxes == goal:
            first_solved = i if first_solved < 0 else first_solved
            continue
        for a, d in enumerate(steps):
            nxt = player + d
            if not floor[nxt]:
                continue
            new_boxes = boxes
            if boxes >> nxt & 1:
                beyond = nxt + d
                if not floor[beyond] or boxes >> beyond & 1:
                    continue
                new_boxes = boxes ^ (1 << nxt) ^ (1 << beyond)
            new = new_boxes * cells + nxt
            j = index.setdefault(new, len(states))
            if j == len(states):
                states.append(new)
                parent.append((i, a))
            row[a] = j
    return RoomGraph(np.array(rows, dtype=np.int32), np.array(solved), _path(parent, first_solved))


def _path(parent: list[tuple[int, int]], state: int) -> tuple[str, ...] | None:
    """The moves from state 0 to `state` along the BFS tree."""
    if state < 0:
        return None
    moves = []
    while state > 0:
        state, a = parent[state]
        moves.append(ACTIONS[a])
    return tuple(reversed(moves))


def random_policy_success(graphs: Sequence[RoomGraph], turns: int) -> float:
    """Exact mean probability that uniformly random moves solve each room within `turns` moves.

    All rooms advance together: their graphs are laid end to end in one flat array, and each move
    spreads a quarter of every state's probability to each of its successors (one `bincount`).
    """
    sizes = np.array([len(g.solved) for g in graphs])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate([g.table.reshape(-1) + off for g, off in zip(graphs, offsets, strict=True)])
    solved = np.concatenate([g.solved for g in graphs])
    dist = np.zeros(int(sizes.sum()))
    dist[offsets] = 1.0
    for _ in range(turns):
        dist = np.bincount(flat, weights=np.repeat(dist * 0.25, 4), minlength=len(dist))
    per_room = np.add.reduceat(dist * solved, offsets)
    return float(per_room.mean())


FIXED_SEARCH_MOVES = 10
"""The longest fixed sequence searched exactly: the search grows about fourfold a move (2 s on 128 6x6 rooms
at 10 moves, 37 s at 12)."""


def padded_tables(graphs: Sequence[RoomGraph]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rooms' graphs as FrozenLake's search reads maps: a next-state table (N, S, 4) padded with
    unreachable self-loops past the largest room's states, starts (N,) (state 0) and one goal state per room
    (every solved state of a room merged into its first, which is absorbing; an unsolvable room's goal is a
    padding state no move reaches)."""
    n, size = len(graphs), max(len(g.solved) for g in graphs)
    table = np.tile(np.arange(size + 1, dtype=np.int32)[None, :, None], (n, 1, 4))
    goals = np.zeros(n, dtype=np.int32)
    for i, g in enumerate(graphs):
        solved = np.flatnonzero(g.solved)
        goals[i] = solved[0] if len(solved) else size
        merged = np.where(g.solved[g.table], goals[i], g.table)
        merged[g.solved] = goals[i]
        table[i, : len(g.solved)] = merged
    return table, np.zeros(n, dtype=np.int32), goals


def fixed_sequence_success(graphs: Sequence[RoomGraph], turns: int) -> tuple[float, tuple[str, ...]]:
    """The success of the move sequence of `min(turns, FIXED_SEARCH_MOVES)` moves that solves the most of
    these rooms, played whatever the room (exact: FrozenLake's branch and bound on `padded_tables`), and the
    sequence. Beyond `FIXED_SEARCH_MOVES` it is a lower bound on the best fixed sequence of `turns` moves."""
    tables = padded_tables(graphs)
    sequence = best_fixed_sequence(*tables, min(turns, FIXED_SEARCH_MOVES), ACTIONS)
    return sequence_success(*tables, sequence, ACTIONS), sequence


def fixed_sequence_name(turns: int) -> str:
    """The fixed sequence's key: `best_fixed_sequence` where it is searched at the cap itself, else
    `best_fixed_10_moves` (the best of `FIXED_SEARCH_MOVES` moves, a lower bound at the cap)."""
    return "best_fixed_sequence" if turns <= FIXED_SEARCH_MOVES else f"best_fixed_{FIXED_SEARCH_MOVES}_moves"


def held_out_rooms(
    episodes: int, config: SokobanConfig | None = None, seeds: Sequence[int] | None = None
) -> list[Room]:
    """The rooms `SokobanEnv(config).reset(seed=s)` plays for `seeds` (None: the `episodes` seeds from
    `HELD_OUT_SEED_START`).

    `reset(seed=s)` seeds the env's `np_random` with Gymnasium's `seeding.np_random(s)` and draws the
    room from it (`draw_room`); so does this, without building an env.
    """
    cfg = build_config(SokobanConfig, config, {}, "SokobanEnv")
    return [draw_room(seeding.np_random(seed)[0], cfg) for seed in scored_seeds(episodes, seeds)]


@lru_cache(maxsize=16)
def _held_out_graphs(
    episodes: int,
    dim_x: int,
    dim_y: int,
    num_boxes: int,
    search_depth: int,
    seeds: tuple[int, ...] | None = None,
    *,
    needs_detour: bool = False,
) -> tuple[RoomGraph, ...]:
    """The rooms' state graphs, of `seeds` or else the `episodes` held-out seeds (cached: the turn cap only
    changes the cheap part)."""
    config = SokobanConfig(
        dim_x=dim_x, dim_y=dim_y, num_boxes=num_boxes, search_depth=search_depth, needs_detour=needs_detour
    )
    return tuple(room_graph(room) for room in held_out_rooms(episodes, config, seeds))


def _config_graphs(
    config: SokobanConfig, episodes: int, seeds: Sequence[int] | None
) -> tuple[RoomGraph, ...]:
    """`_held_out_graphs` for the generator settings of `config`, of `seeds` (None: `episodes` held-out seeds)."""
    c, played = config, None if seeds is None else tuple(seeds)
    count = episodes if played is None else len(played)
    return _held_out_graphs(
        count, c.dim_x, c.dim_y, c.num_boxes, c.search_depth, played, needs_detour=c.needs_detour
    )


def sokoban_baselines(
    episodes: int = 1000,
    max_steps: int | None = None,
    config: SokobanConfig | dict[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
) -> dict[str, float]:
    """`random` and `optimal` success within `max_steps` moves on the rooms of `seeds` (None: the
    `episodes` seeds from `HELD_OUT_SEED_START`), and the mean and max length of the optimal (shortest)
    solutions (`fixed_sequence_baseline` adds the best fixed sequence on the same rooms).

    `max_steps` defaults to the env's `max_steps`; pass the episode's real turn limit (the smaller of the
    env's `max_steps` and the pipeline's `max_actions_per_traj`). Only the room generator's settings of
    `config` matter (`dim_x`, `dim_y`, `num_boxes`, `search_depth`, `needs_detour`). The state graphs are cached per
    (rooms, generator settings): the first call takes about 1 s for 1000 default rooms (6x6, one box, at most
    a few hundred states each) and about 12 s for 8x8 two-box rooms (thousands); later ones milliseconds.

    >>> result = sokoban_baselines(episodes=20, max_steps=30)
    >>> sorted(result)
    ['optimal', 'optimal_moves_max', 'optimal_moves_mean', 'random', 'unsolvable']
    >>> result["optimal"], result["unsolvable"]
    (1.0, 0.0)
    """
    cfg = config if isinstance(config, SokobanConfig) else SokobanConfig(**(config or {}))
    turns = cfg.max_steps if max_steps is None else max_steps
    graphs = _config_graphs(cfg, episodes, seeds)
    lengths = [len(g.solution) for g in graphs if g.solution is not None]
    return {
        "random": random_policy_success(graphs, turns),
        "optimal": sum(n <= turns for n in lengths) / len(graphs),
        "optimal_moves_mean": float(np.mean(lengths)) if lengths else float("nan"),
        "optimal_moves_max": float(max(lengths, default=0)),
        "unsolvable": float(len(graphs) - len(lengths)),
    }


def fixed_sequence_baseline(
    episodes: int, turns: int, config: SokobanConfig, seeds: Sequence[int] | None = None
) -> tuple[str, float]:
    """The best fixed sequence's key (`fixed_sequence_name`) and success within `turns` moves on the rooms
    `sokoban_baselines` scores for the same arguments (their cached graphs). The search takes about 2 s on
    128 6x6 one-box rooms at 10 moves, 12 s on 128 8x8 two-box rooms, and about 30 s on 1000 6x6 rooms."""
    graphs = _config_graphs(config, episodes, seeds)
    return fixed_sequence_name(turns), fixed_sequence_success(graphs, turns)[0]
