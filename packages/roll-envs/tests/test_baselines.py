"""FrozenLake baselines: exact random-policy success, exhaustive fixed-sequence search."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from roll_envs.baseline_types import HELD_OUT_SEED_START
from roll_envs.envs.frozen_lake import ACTIONS, FrozenLakeEnv
from roll_envs.envs.frozen_lake.baselines import (
    PRECOMPUTED_SEQUENCES,
    SEARCH_MAPS,
    SEARCH_SEED_START,
    best_fixed_sequence,
    frozen_lake_baselines,
    random_policy_success,
    sequence_success,
    transition_table,
)


def test_transition_table_agrees_with_the_env():
    table, starts, _ = transition_table(range(20))
    for i, seed in enumerate(range(20)):
        env = FrozenLakeEnv()
        env.reset(seed=seed)
        assert env.position == starts[i]
        for a in (0, 1, 1, 2, 3, 2):
            before = env.position
            env.step(f"<answer>{ACTIONS[a]}</answer>")
            assert env.position == table[i, before, a] or env.elapsed_steps > 6


def test_random_policy_matches_monte_carlo():
    table, starts, goals = transition_table(range(100, 140))
    exact = random_policy_success(table, starts, goals, 6)
    rng = np.random.default_rng(0)
    rows = np.arange(len(starts))
    hits = []
    for _ in range(2000):
        state = starts.copy()
        for _ in range(6):
            state = table[rows, state, rng.integers(0, 4, len(rows))]
        hits.append((state == goals).mean())
    assert abs(np.mean(hits) - exact) < 0.01


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 5])
def test_branch_and_bound_equals_brute_force(steps):
    search = transition_table(range(500, 700))
    best = max(sequence_success(*search, seq) for seq in itertools.product(ACTIONS, repeat=steps))
    assert sequence_success(*search, best_fixed_sequence(*search, steps)) == best


def test_precomputed_sequences_are_the_search_result():
    search = transition_table(range(SEARCH_SEED_START, SEARCH_SEED_START + SEARCH_MAPS))
    for steps in (3, 6, 8):
        assert " ".join(best_fixed_sequence(*search, steps)) == PRECOMPUTED_SEQUENCES[steps]


def test_baselines_are_fast_and_in_range():
    start = time.perf_counter()
    result = frozen_lake_baselines(1000)
    assert time.perf_counter() - start < 3.0
    assert set(result) == {"random", "best_fixed_sequence"}
    assert 0.1 < result["random"] < result["best_fixed_sequence"] < 0.6
    assert HELD_OUT_SEED_START > SEARCH_MAPS
