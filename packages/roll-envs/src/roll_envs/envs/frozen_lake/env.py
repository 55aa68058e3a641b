"""`FrozenLakeEnv`: FrozenLake as text, with Gymnasium FrozenLake-v1's moves, rewards and terminations
(slippery ice included, with the same random-number use) on the maps of `roll_envs.envs.frozen_lake.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.baseline_types import EnvBaselines, scored_seeds
from roll_envs.envs.frozen_lake.baselines import description_rule, frozen_lake_baselines, played_success
from roll_envs.envs.frozen_lake.rules import (
    ACTIONS,
    FrozenLakeConfig,
    frozen_lake_description,
    generate_map,
    move,
    shortest_path_moves,
)
from roll_envs.errors import EnvConfigError
from roll_envs.tiles import Color, Tile


class FrozenLakeEnv(BaseEnv):
    """FrozenLake: `P` you, `_` ice, `O` hole, `G` goal, `X` you in a hole, `√` you on the goal.

    Reward 1 on reaching the goal, minus `hole_penalty` (default 0) on falling into a hole, else 0; the
    episode terminates in a hole or on the goal and is truncated after `max_steps` turns. `reset(options={"map": ["SFF", "FHF", "FFG"]})` plays a given map.
    With `describe`, a line in words follows the board (`frozen_lake_description`); `demonstration()` gives
    the first move of a shortest path to the goal.

    >>> env = FrozenLakeEnv()
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("<answer>Left</answer>")
    >>> sorted(k for k in info if k.startswith("action_is"))
    ['action_is_effective', 'action_is_refused', 'action_is_valid']
    """

    config_cls = FrozenLakeConfig
    owns_random_state = True  # draws only from the episode rng (np_random and generators seeded from it)
    never_blocks = True  # in-memory game logic: a step is microseconds, never waits
    config: FrozenLakeConfig
    desc: Sequence[str] = ()  # the state before the first reset (no map); each reset sets it on the instance
    position: int = 0

    @property
    def instruction(self) -> str:
        """The system prompt (about 60 words)."""
        multi = self.multi_action_hint("moves")
        slip = " The ice is slippery: you may slide sideways." if self.config.is_slippery else ""
        line = (
            " Below the map, a line says where you are, where the goal is and which moves lead towards it,"
            " and what each move leads to."
            if self.config.describe
            else ""
        )
        return (
            "You are walking on a frozen lake. Reach the goal G and do not fall into a hole O. "
            f"The map: P is you, _ is ice, O is a hole, G is the goal.{line} "
            f"Moves: Left, Down, Right, Up. A move into the edge does nothing.{slip}{multi} "
            f"Answer with one move, like {self.format_answer('Left')}."
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
            self.desc = generate_map(rng, self.config.size, self.config.p, self.config.needs_sidestep)
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
        """The board, one row per line; with `describe`, then the board in words (`frozen_lake_description`)."""
        board = self._board()
        if not self.config.describe:
            return board
        return f"{board}\n{frozen_lake_description(board, self.config.offset_cells)}"

    def demonstration(self) -> str | None:
        """The first move of a shortest path from you to the goal that enters no hole (`shortest_path_moves`:
        breadth-first, ties in `ACTIONS` order), as an answer; None once the episode ended (in a hole, on the
        goal, or after `max_steps` turns) or when no path exists. On slippery ice it is still the shortest
        path's move (the move the plan wants; the ice may send you sideways), not the likeliest to arrive.
        With `demonstrator: description_rule`, the move `description_rule` reads off the line instead (None
        only once the episode ended)."""
        if (
            not self.desc
            or self._letter(self.position) in "GH"
            or self.elapsed_steps >= self.config.max_steps
        ):
            return None
        if self.config.demonstrator == "description_rule":
            return self.format_answer(description_rule(self.text_observation()))
        moves = shortest_path_moves(self.desc, self.position)
        return self.format_answer(moves[0]) if moves else None

    def is_success(self) -> bool:
        """On the goal."""
        return bool(self.desc) and self._letter(self.position) == "G"

    def baselines(
        self, turns: int, episodes: int = 1000, seeds: Sequence[int] | None = None
    ) -> EnvBaselines | None:
        """`random` and `best_fixed_sequence` (`frozen_lake_baselines`: the sequence searched on these very
        maps) on this size and p, on the maps of `seeds` (None: `episodes` seeds from `HELD_OUT_SEED_START`);
        with `describe`, also `description_rule` played on a copy of this env. None on slippery ice."""
        if self.config.is_slippery:  # the dynamic programming assumes deterministic moves
            return None
        played = scored_seeds(episodes, seeds)
        rates = frozen_lake_baselines(
            len(played), turns, self.config.size, self.config.p, played, self.config.needs_sidestep
        )
        note = "Below the fixed sequence (the best on these maps) the agent does not read the board."
        if self.config.describe:
            player = FrozenLakeEnv(self.config, render_mode=None)
            rates["description_rule"] = played_success(player, description_rule, played, turns)
            note += " description_rule: onto the goal if next to you, else towards it onto ice."
        return EnvBaselines("FrozenLake", "maps", turns, rates, note, {}, played)

    @property
    def has_baselines(self) -> bool:
        """With deterministic ice (the default) only."""
        return not self.config.is_slippery

    def render_frame(self) -> np.ndarray:
        """Tiles: ice, holes, the goal's flag and the player (a cross in a hole, on green at the goal)."""
        from roll_envs.tiles import tile_frame

        return tile_frame(self._board().split("\n"), FROZEN_LAKE_TILES)

    def _board(self) -> str:
        """The board alone, one row per line: what `render_frame` draws and the description reads."""
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
