"""FrozenLake as text: reach the goal across a frozen lake without falling into a hole.

Maps follow RAGEN's FrozenLake: each seed draws a new `size` x `size` board whose cells are frozen
with probability `p`, a random start and a distinct random goal, redrawn until a path joins them.
Moves, rewards and terminations are those of Gymnasium's FrozenLake-v1 on the same map (slippery
ice included, with the same random-number use), so `gymnasium.make("FrozenLake-v1", desc=...)`
is an independent check.

Every public name of `rules` and `env` is importable from here.

Modules:
    rules.py       the actions and their moves, the config, map generation, shortest paths, reading a board
    env.py         `FrozenLakeEnv` and its tiles
    baselines.py   the random policy's, the best fixed move sequence's and the description rule's success rates
"""

from roll_envs.envs.frozen_lake.env import FROZEN_LAKE_TILES, FrozenLakeEnv
from roll_envs.envs.frozen_lake.rules import (
    ACTIONS,
    FrozenLakeConfig,
    frozen_lake_description,
    frozen_lake_neighbours,
    generate_map,
    has_path,
    move,
    shortest_path_moves,
)

__all__ = [
    "ACTIONS",
    "FROZEN_LAKE_TILES",
    "FrozenLakeConfig",
    "FrozenLakeEnv",
    "frozen_lake_description",
    "frozen_lake_neighbours",
    "generate_map",
    "has_path",
    "move",
    "shortest_path_moves",
]
