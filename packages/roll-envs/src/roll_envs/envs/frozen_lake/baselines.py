"""FrozenLake's reference success rates, which an agent must beat to show it reads the board:

- `random`: a uniformly random move each turn (exact expectation, computed by dynamic programming).
- `best_fixed_sequence`: the single move sequence (ignoring the board) that solves the most maps
  of a search set, found by exhaustive search with memoisation, then scored on held-out maps.

Both use deterministic ice (the default) and the same map generator as `FrozenLakeEnv`, on the maps
of the seeds given (a run's validation seeds), else on the maps from `HELD_OUT_SEED_START`. `FrozenLakeEnv.baselines` reports them as `EnvBaselines`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from roll_envs.baseline_types import HELD_OUT_SEED_START
from roll_envs.envs.frozen_lake.rules import ACTIONS, FrozenLakeConfig, generate_map, move

SEARCH_SEED_START = 2_000_000
"""First seed of the maps the best fixed sequence is searched on (disjoint from the held-out ones)."""

SEARCH_MAPS = 1000
"""How many maps the best fixed sequence is searched on."""

PRECOMPUTED_SEQUENCES: dict[int, str] = {
    1: "Down",
    2: "Down Right",
    3: "Down Right Up",
    4: "Down Right Up Up",
    5: "Down Right Up Up Left",
    6: "Down Right Up Right Up Left",
    7: "Left Left Down Right Right Right Up",
    8: "Down Right Right Up Up Left Left Left",
    9: "Down Right Right Up Up Up Left Left Left",
    10: "Down Down Right Right Up Up Up Left Left Left",
}
"""`best_fixed_sequence` on the default search maps (size 4, p 0.8) by length; a test recomputes them."""


def transition_table(
    seeds: Sequence[int], size: int = 4, p: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each seed's map: next-state table (N, S, 4) with holes and goal absorbing, start (N,), goal (N,)."""
    n_states = size * size
    table = np.zeros((len(seeds), n_states, 4), dtype=np.int16)
    starts = np.zeros(len(seeds), dtype=np.int16)
    goals = np.zeros(len(seeds), dtype=np.int16)
    for i, seed in enumerate(seeds):
        desc = generate_map(np.random.default_rng(seed), size, p)
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
    table: np.ndarray, starts: np.ndarray, goals: np.ndarray, steps: int
) -> tuple[str, ...]:
    """The move sequence of length `steps` that solves the most maps: exact branch and bound.

    A branch is cut when even the maps whose goal is still within reach cannot beat the best so
    far; the goal is absorbing, so a map counts as solved if it ends on its goal.
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
    return tuple(ACTIONS[a] for a in best[0][1])


def sequence_success(
    table: np.ndarray, starts: np.ndarray, goals: np.ndarray, sequence: tuple[str, ...]
) -> float:
    """Fraction of maps solved by playing `sequence` regardless of the board."""
    rows = np.arange(table.shape[0])
    state = starts.copy()
    for name in sequence:
        state = table[rows, state, ACTIONS.index(name)]
    return float((state == goals).mean())


def fixed_sequence_for(steps: int, size: int = 4, p: float = 0.8) -> tuple[str, ...]:
    """The best fixed sequence on the search maps: precomputed for the defaults, else searched (seconds)."""
    if (size, p) == (4, 0.8) and steps in PRECOMPUTED_SEQUENCES:
        return tuple(PRECOMPUTED_SEQUENCES[steps].split())
    search = transition_table(range(SEARCH_SEED_START, SEARCH_SEED_START + SEARCH_MAPS), size, p)
    return best_fixed_sequence(*search, steps)


def frozen_lake_baselines(
    episodes: int = 1000,
    max_steps: int | None = None,
    size: int = 4,
    p: float = 0.8,
    seeds: Sequence[int] | None = None,
) -> dict[str, float]:
    """Success rates of the `random` and `best_fixed_sequence` baselines on the maps of `seeds` (None: the
    `episodes` seeds from `HELD_OUT_SEED_START`).

    `max_steps` defaults to `FrozenLakeConfig().max_steps`; pass the episode's real turn limit
    (the smaller of the env's `max_steps` and the pipeline's turn cap) to compare like with like.
    Takes about 0.1 s with the default map parameters and up to 10 steps.

    >>> sorted(frozen_lake_baselines(episodes=50, max_steps=4))
    ['best_fixed_sequence', 'random']
    """
    steps = FrozenLakeConfig().max_steps if max_steps is None else max_steps
    played = range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes) if seeds is None else seeds
    held = transition_table(played, size, p)
    sequence = fixed_sequence_for(steps, size, p)
    return {
        "random": random_policy_success(*held, steps),
        "best_fixed_sequence": sequence_success(*held, sequence),
    }
