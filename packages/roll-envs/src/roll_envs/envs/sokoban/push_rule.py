"""The best simple rule found for Sokoban, a policy that reads only the grid of the observation: push a box
towards the nearest free target, never into a dead corner, walking to the pushing cell the shortest way; when
no push brings a box nearer, the nearest other push.

It plans the player's walk (breadth-first around the boxes) but never a box's path: it takes one push at a
time, so it fails where the nearest push leads the box into a dead end or back and forth.
`SokobanEnv.baselines` scores it as `push_rule`.
"""

from __future__ import annotations

from collections import deque

from roll_envs.envs.sokoban.generator import Room
from roll_envs.envs.sokoban.rules import ACTIONS, DEFAULT_GRID, deltas
from roll_envs.errors import EnvConfigError


def read_grid(observation: str, grid_vocab: dict[str, str] | None = None) -> Room:
    """The room an observation's grid shows (its leading lines made of grid symbols; a line in words is not
    read), with the boxes and the player where they stand now.

    >>> room = read_grid("#####\\n#PXO#\\n#####")
    >>> room.player, sorted(room.boxes), sorted(room.targets)
    (6, [7], [8])
    """
    g = grid_vocab or DEFAULT_GRID
    symbols = set(g.values())
    rows = []
    for line in observation.split("\n"):
        if not line or not set(line) <= symbols:
            break
        rows.append(line)
    if not rows or len({len(r) for r in rows}) != 1:
        raise EnvConfigError(
            f"sokoban: expected a rectangular grid of {sorted(symbols)} first; got {observation!r}"
        )
    cells = "".join(rows)
    role = {symbol: name for name, symbol in g.items()}
    named = [role[c] for c in cells]
    player = next((i for i, n in enumerate(named) if n.startswith("player")), None)
    if player is None:
        raise EnvConfigError(f"sokoban: the grid shows no player ({g['player']} or {g['player_on_target']})")
    return Room(
        height=len(rows),
        width=len(rows[0]),
        floor=frozenset(i for i, n in enumerate(named) if n != "wall"),
        targets=frozenset(
            i for i, n in enumerate(named) if n in ("target", "box_on_target", "player_on_target")
        ),
        boxes=frozenset(i for i, n in enumerate(named) if n.startswith("box")),
        player=player,
    )


def push_rule(observation: str, grid_vocab: dict[str, str] | None = None) -> str:
    """The rule's move: of the pushes that do not put a box (off its target, where there are several) into a
    corner that is not a target, those that bring it strictly nearer (Manhattan) the nearest target without a
    box first, then any other; of those, the one whose pushing cell the player reaches in fewest moves (ties
    in `ACTIONS` order); the first move of that walk, or the push itself. Without any push, the first move of
    `ACTIONS` onto free floor.

    >>> push_rule("######\\n#P_X_O\\n######")
    'Right'
    """
    room = read_grid(observation, grid_vocab)
    steps = deltas(room.width)
    best: tuple[tuple[bool, int, int], str] | None = None
    for box in room.boxes - room.targets if len(room.boxes) > 1 else room.boxes:
        free = room.targets - (room.boxes - {box})
        here = _distance(room, box, free)
        for a, d in enumerate(steps):
            beyond, stand = box + d, box - d
            if not (_open(room, beyond) and _open(room, stand)) or _dead_corner(room, beyond):
                continue
            walk = _walk(room, stand)
            key = (_distance(room, beyond, free) >= here, len(walk or ()), a)
            if walk is not None and (best is None or key < best[0]):
                best = (key, (*walk, ACTIONS[a])[0])
    if best is not None:
        return best[1]
    return next((ACTIONS[a] for a, d in enumerate(steps) if _open(room, room.player + d)), ACTIONS[0])


def _open(room: Room, cell: int) -> bool:
    """Floor without a box."""
    return cell in room.floor and cell not in room.boxes


def _distance(room: Room, cell: int, targets: frozenset[int]) -> int:
    """Manhattan distance from `cell` to the nearest of `targets`."""
    r, c = divmod(cell, room.width)
    return min(abs(r - t // room.width) + abs(c - t % room.width) for t in targets)


def _dead_corner(room: Room, cell: int) -> bool:
    """A cell off the targets with a wall above or below and a wall left or right: a box there never moves."""
    w = room.width
    walled = [cell + d not in room.floor for d in deltas(w)]  # Up, Down, Left, Right
    return cell not in room.targets and (walled[0] or walled[1]) and (walled[2] or walled[3])


def _walk(room: Room, goal: int) -> list[str] | None:
    """The moves of a shortest walk of the player to `goal` around the boxes (breadth-first, ties in
    `ACTIONS` order); None when it cannot get there."""
    parents: dict[int, tuple[int, int]] = {room.player: (room.player, -1)}
    queue = deque([room.player])
    while queue and goal not in parents:
        cell = queue.popleft()
        for a, d in enumerate(deltas(room.width)):
            if _open(room, cell + d) and cell + d not in parents:
                parents[cell + d] = (cell, a)
                queue.append(cell + d)
    if goal not in parents:
        return None
    moves: list[str] = []
    while parents[goal][1] >= 0:
        goal, a = parents[goal]
        moves.append(ACTIONS[a])
    return moves[::-1]
