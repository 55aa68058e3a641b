"""Validation episodes won and lost between two passes over the same seeds, and through a checkpoint."""

from __future__ import annotations

import json

from roll_pipeline.observe.flips import ValidationFlips
from roll_rollout import RolloutBatch, Trajectory


def _batch(outcomes: dict[int, list[bool]], failed: int = 0) -> RolloutBatch:
    trajs = [
        Trajectory(env_id=i, group_id=seed, episode_id=0, tag="Lake", seed=seed, success=won)
        for seed, wins in outcomes.items()
        for i, won in enumerate(wins)
    ]
    broken = [Trajectory(env_id=0, group_id=failed, episode_id=0, tag="Lake", seed=failed, error="x")] * bool(
        failed
    )
    return RolloutBatch(trajectories=trajs, failed=broken)


def test_flips_count_episodes_won_and_lost_since_the_last_pass_and_survive_a_checkpoint():
    flips = ValidationFlips()
    assert flips.update(_batch({1: [True, True], 2: [False, False], 3: [True, False]})) == {}
    # seed 1 loses one of two, seed 2 wins both, seed 3 unchanged in count: the rate moves 0.5 -> 0.67
    second = _batch({1: [True, False], 2: [True, True], 3: [False, True]})
    resumed = ValidationFlips()
    resumed.load_state(json.loads(json.dumps(flips.state())))
    want = {"val/flips/fail_to_success": 2.0, "val/flips/success_to_fail": 1.0}
    assert flips.update(second) == want and resumed.update(second) == want
    # a seed whose episode failed with an env error counts as a failure of that seed
    assert flips.update(_batch({1: [True, False], 2: [True, True]}, failed=3)) == {
        "val/flips/fail_to_success": 0.0,
        "val/flips/success_to_fail": 1.0,
    }
