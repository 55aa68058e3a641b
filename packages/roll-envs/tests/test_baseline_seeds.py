"""Baselines on given seeds (a run's validation seeds): every built-in scores exactly those episodes, the result
names them, and `distinct_observations` counts the prompts (a third-party hook's seeds: test_env_baselines_hook.py)."""

from __future__ import annotations

import roll_envs
from roll_envs import env_baselines
from roll_envs.baseline_types import HELD_OUT_SEED_START
from roll_envs.baselines import distinct_observations
from roll_envs.envs.four_choice import ANSWERS, right_answer
from roll_envs.envs.frozen_lake.baselines import frozen_lake_baselines
from roll_envs.envs.sokoban.baselines import sokoban_baselines

VALIDATION = tuple(range(10**9, 10**9 + 64))
"""The seeds of a run validating 64 groups (roll_rollout.validation_seeds(64))."""


def test_four_choice_best_fixed_answer_on_the_validation_seeds_is_measured_there():
    env = roll_envs.make("four_choice", render_mode=None)
    wins = dict.fromkeys(ANSWERS, 0)
    for seed in VALIDATION:
        env.reset(seed=seed)
        wins[right_answer(env.colour)] += 1
    assert wins == {"A": 15, "B": 12, "C": 19, "D": 18}  # 4 colours, drawn unevenly by these 64 seeds
    found = env_baselines(env, turns=1, seeds=VALIDATION)
    assert found.success == {"random": 0.25, "best_fixed_answer": 19 / 64}  # 0.297
    assert found.seeds == VALIDATION
    default = env_baselines(env, turns=1)  # the 1000 seeds from HELD_OUT_SEED_START: another number
    assert default.success["best_fixed_answer"] == 0.267
    assert default.seeds == tuple(range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 1000))


def test_frozen_lake_and_sokoban_score_the_seeds_given():
    frozen = env_baselines(roll_envs.make("frozen_lake"), 8, seeds=VALIDATION)
    assert frozen.success == frozen_lake_baselines(max_steps=8, seeds=VALIDATION)
    assert frozen.success != frozen_lake_baselines(len(VALIDATION), 8)  # not the default seeds' maps
    sokoban = env_baselines(roll_envs.make("sokoban"), 30, seeds=VALIDATION[:20])
    assert sokoban.success["random"] == sokoban_baselines(max_steps=30, seeds=VALIDATION[:20])["random"]
    assert sokoban.seeds == VALIDATION[:20]


def test_distinct_observations_counts_the_prompts_the_episodes_show():
    assert distinct_observations(roll_envs.make("four_choice", render_mode=None), VALIDATION) == 4
    assert (
        distinct_observations(roll_envs.make("four_choice", colour="red", render_mode=None), VALIDATION) == 1
    )
    assert distinct_observations(roll_envs.make("frozen_lake", render_mode=None), VALIDATION) == 64
