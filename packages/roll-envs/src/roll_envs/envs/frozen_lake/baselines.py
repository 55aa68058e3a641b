"""FrozenLake's reference success rates, which an agent must beat to show it reads the board:

- `random`: a uniformly random move each turn (exact expectation, computed by dynamic programming).
- `best_fixed_sequence`: the single move sequence (ignoring the board) that solves the most of the scored
  maps themselves, found by exhaustive search with memoisation: the best any board-blind policy does there.
- `description_rule` (with `describe` only): a ten-line rule (`description_rule`) that reads only the line in
  words of the observation, played on the env.

All use deterministic ice (the default) and the same map generator as `FrozenLakeEnv`, on the maps
of the seeds given (a run's validation seeds), else on the maps from `HELD_OUT_SEED_START`. `FrozenLakeEnv.baselines` reports them as `EnvBaselines`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from roll_envs.baseline_types import HELD_OUT_SEED_START, scored_seeds  # noqa: F401 (read from here too)
from roll_envs.envs.frozen_lake.rules import ACTIONS, FrozenLakeConfig, generate_map, move

if TYPE_CHECKING:
    from roll_envs.base import BaseEnv

HELD_OUT_MAPS = 1000
"""How many maps from `HELD_OUT_SEED_START` `PRECOMPUTED_SEQUENCES` were searched on."""

PRECOMPUTED_SEQUENCES: dict[int, str] = {
    1: "Left",
    2: "Up Left",
    3: "Up Left Down",
    4: "Up Right Down Down",
    5: "Up Right Down Down Left",
    6: "Down Down Right Right Up Up",
    7: "Down Down Right Right Up Up Up",
    8: "Down Down Right Right Up Up Up Left",
    9: "Down Down Right Right Up Up Up Left Left",
    10: "Up Right Right Right Down Down Left Down Left Left",
}
"""`best_fixed_sequence` by length on the default held-out maps (`HELD_OUT_MAPS` from `HELD_OUT_SEED_START`,
size 4, p 0.8), which `roll baselines --env frozen_lake` scores (the 10-move search takes seconds); a test
recomputes some of them."""

_OPPOSITE = {"Left": "Right", "Right": "Left", "Up": "Down", "Down": "Up"}


def transition_table(
    seeds: Sequence[int], size: int = 4, p: float = 0.8, needs_sidestep: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each seed's map: next-state table (N, S, 4) with holes and goal absorbing, start (N,), goal (N,)."""
    n_states = size * size
    table = np.zeros((len(seeds), n_states, 4), dtype=np.int16)
    starts = np.zeros(len(seeds), dtype=np.int16)
    goals = np.zeros(len(seeds), dtype=np.int16)
    for i, seed in enumerate(seeds):
        desc = generate_map(np.random.default_rng(seed), size, p, needs_sidestep)
        flat = "".join(desc)
        starts[i], goals[i] = flat.index("S"), flat.index("G")
        for s, letter in enumerate(flat):
            for a in range(4):
                table[i, s, a] = s if letter in "GH" else move(desc, s, a)
    return table, starts, goals


def random_policy_success(table: np.ndarray, starts: np.ndarray, goals: np.ndarray, steps: int) -> float:
    """Exact mean probability that uniformly random moves reach the goal within `steps` moves."""
    n, n_states, _ = table.shape
    rows = np.arange(n)[:, None]
    mix = np.zeros((n, n_states, n_states))
    for a in range(4):
        np.add.at(mix, (rows, np.arange(n_states)[None, :], table[:, :, a]), 0.25)
    dist = np.zeros((n, n_states))
    dist[np.arange(n), starts] = 1.0
    for _ in range(steps):
        dist = np.einsum("ns,nst->nt", dist, mix)
    return float(dist[np.arange(n), goals].mean())


def goal_distances(table: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """(N, S) moves from each cell to its map's goal avoiding holes (a large number when unreachable)."""
    n, n_states, _ = table.shape
    far = np.iinfo(np.int16).max
    dist = np.full((n, n_states), far, dtype=np.int32)
    dist[np.arange(n), goals] = 0
    for step in range(1, n_states):
        reach = (dist[np.arange(n)[:, None, None], table] == step - 1).any(axis=2)
        moving = table != np.arange(n_states)[None, :, None]  # absorbing cells (holes, goal) do not move
        reach &= moving.any(axis=2) & (dist == far)
        if not reach.any():
            break
        dist[reach] = step
    return dist


def best_fixed_sequence(
    table: np.ndarray, starts: np.ndarray, goals: np.ndarray, steps: int, actions: Sequence[str] = ACTIONS
) -> tuple[str, ...]:
    """The move sequence of length `steps` that solves the most maps: exact branch and bound.

    A branch is cut when even the maps whose goal is still within reach cannot beat the best so
    far; the goal is absorbing, so a map counts as solved if it ends on its goal. Any game whose episodes
    are such tables (one absorbing goal state each) can use it: `actions` names the table's columns
    (Sokoban's rooms do, `roll_envs.envs.sokoban.baselines`).
    """
    rows = np.arange(table.shape[0])
    dist = goal_distances(table, goals)
    best: list[tuple[int, tuple[int, ...]]] = [(-1, ())]
    seen: set[tuple[int, bytes]] = set()

    def bound(state: np.ndarray, depth: int) -> int:
        return int((dist[rows, state] <= depth).sum())

    def search(state: np.ndarray, depth: int, prefix: tuple[int, ...]) -> None:
        if depth == 0:
            value = int((state == goals).sum())
            if value > best[0][0]:
                best[0] = (value, prefix)
            return
        key = (depth, state.tobytes())
        if key in seen:
            return
        seen.add(key)
        children = [(bound(nxt, depth - 1), a, nxt) for a in range(4) for nxt in [table[rows, state, a]]]
        for upper, a, nxt in sorted(children, key=lambda c: -c[0]):
            if upper > best[0][0]:
                search(nxt, depth - 1, (*prefix, a))

    search(starts.astype(np.int64), steps, ())
    return tuple(actions[a] for a in best[0][1])


def sequence_success(
    table: np.ndarray,
    starts: np.ndarray,
    goals: np.ndarray,
    sequence: tuple[str, ...],
    actions: Sequence[str] = ACTIONS,
) -> float:
    """Fraction of maps solved by playing `sequence` (moves named by `actions`) regardless of the board."""
    rows = np.arange(table.shape[0])
    state = starts.copy()
    for name in sequence:
        state = table[rows, state, list(actions).index(name)]
    return float((state == goals).mean())


def description_rule(observation: str) -> str:
    """The move of a simple rule that reads only the line in words of a described observation
    (`FrozenLakeConfig.describe`): onto a neighbouring goal; else towards the goal onto ice, along its larger
    offset first; else onto ice sideways rather than back; else onto ice; else Left.

    >>> description_rule("P_\\n_G\\nYou are at row 1, column 1. The goal is at row 2, column 2: Down 1, Right 1."
    ...     " Left: edge, Down: hole, Right: ice, Up: edge.")
    'Right'
    """
    line = observation.rsplit("\n", 1)[-1]
    leads = dict(re.findall(r"(Left|Down|Right|Up): (\w+)", line))
    offset = re.search(r"The goal is at [^:]*: ([^.]*)\.", line)
    toward = re.findall(r"(Left|Down|Right|Up) (\d+)", offset.group(1) if offset else "")
    if goal := [a for a in ACTIONS if leads.get(a) == "goal"]:
        return goal[0]
    onward = [a for a, _ in sorted(toward, key=lambda t: -int(t[1])) if leads.get(a) == "ice"]
    ice = [a for a in ACTIONS if leads.get(a) == "ice"]
    sideways = [a for a in ice if _OPPOSITE[a] not in dict(toward)]
    return (onward or sideways or ice or ["Left"])[0]


def played_success(env: BaseEnv, policy: Callable[[str], str], seeds: Sequence[int], turns: int) -> float:
    """Fraction of the episodes of `seeds` that `policy` (text observation -> move) wins on `env` within
    `turns` moves (one a turn), answering in the env's format; resets `env`."""
    won = 0
    for seed in seeds:
        observation, _ = env.reset(seed=seed)
        for _ in range(turns):
            observation, _, terminated, truncated, _ = env.step(env.format_answer(policy(observation)))
            if terminated or truncated:
                break
        won += env.is_success()
    return won / len(seeds)


def frozen_lake_baselines(
    episodes: int = 1000,
    max_steps: int | None = None,
    size: int = 4,
    p: float = 0.8,
    seeds: Sequence[int] | None = None,
    needs_sidestep: bool = False,
) -> dict[str, float]:
    """Success rates of the `random` and `best_fixed_sequence` baselines on the maps of `seeds` (None: the
    `episodes` seeds from `HELD_OUT_SEED_START`) as `generate_map` draws them at `size`, `p` and
    `needs_sidestep`, the sequence searched on those same maps.

    `max_steps` defaults to `FrozenLakeConfig().max_steps`; pass the episode's real turn limit
    (the smaller of the env's `max_steps` and the pipeline's turn cap) to compare like with like.
    The search takes about 0.1 s on 128 maps at 8 steps, 1 s at 10 (and 7 s on 1000 maps at 10 steps, but
    the default held-out maps' sequences are precomputed).

    >>> sorted(frozen_lake_baselines(episodes=50, max_steps=4))
    ['best_fixed_sequence', 'random']
    """
    steps = FrozenLakeConfig().max_steps if max_steps is None else max_steps
    played = scored_seeds(episodes, seeds)
    held = transition_table(played, size, p, needs_sidestep)
    default = (size, p, needs_sidestep) == (4, 0.8, False) and played == scored_seeds(HELD_OUT_MAPS)
    if default and steps in PRECOMPUTED_SEQUENCES:
        sequence = tuple(PRECOMPUTED_SEQUENCES[steps].split())
    else:
        sequence = best_fixed_sequence(*held, steps)
    return {
        "random": random_policy_success(*held, steps),
        "best_fixed_sequence": sequence_success(*held, sequence),
    }
