"""The learning-signal metrics on hand-made batches: which groups and turns carry no advantage."""

from __future__ import annotations

import pytest
import torch
from roll_algos import AdvantageConfig, AdvantageInputs
from roll_pipeline.trainer.signal import signal_metrics


def _turns(
    scores: list[float],
    groups: list[int],
    trajs: list[int],
    steps: list[int],
    anchors: list[int],
    rewards=None,
) -> AdvantageInputs:
    n = len(scores)
    mask = torch.ones(n, 2, dtype=torch.bool)
    step_rewards = torch.tensor(rewards if rewards is not None else scores, dtype=torch.float32)
    token_rewards = torch.zeros(n, 2)
    token_rewards[:, -1] = step_rewards
    return AdvantageInputs(
        response_mask=mask,
        token_rewards=token_rewards,
        episode_scores=torch.tensor(scores),
        step_rewards=step_rewards,
        trajectory_ids=torch.tensor(trajs),
        group_ids=torch.tensor(groups),
        step_ids=torch.tensor(steps),
        anchor_ids=torch.tensor(anchors),
    )


@pytest.mark.parametrize("whiten", [False, True])
def test_grpo_groups_whose_samples_all_scored_alike_carry_no_advantage(whiten):
    # three env groups of two one-turn episodes: scores (1, 1), (0, 1), (0, 0): two of three teach nothing
    inputs = _turns([1, 1, 0, 1, 0, 0], [0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 4, 5], [0] * 6, [-1] * 6)
    got = signal_metrics("grpo", inputs, AdvantageConfig(whiten=whiten))
    assert got == {
        "signal/zero_adv_groups": pytest.approx(2 / 3),
        "signal/zero_adv_turns": pytest.approx(4 / 6),
    }


def test_gigpo_step_groups_and_singletons():
    # one env group, two episodes of two turns, both scoring 1: no episode signal. Turn 0 of both acted on
    # anchor 7 with other step returns (1 and 0.5: a step group with signal); turns 1 sit on anchors 8 and 9 (alone).
    scores, groups, trajs, steps = [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]
    differ = _turns(scores, groups, trajs, steps, [7, 8, 7, 9], rewards=[0.0, 1.0, 0.0, 0.5])
    got = signal_metrics("gigpo", differ, AdvantageConfig(gamma=1.0))
    assert got["signal/zero_adv_step_groups"] == 0.0 and got["signal/singleton_step_turns"] == 0.5
    assert got["signal/zero_adv_groups"] == 0.0  # the step term trains turn 0 of each
    # the same step returns at anchor 7 (0 + 1 = 0.5 + 0.5): nothing anywhere
    alike = _turns(scores, groups, trajs, steps, [7, 8, 7, 9], rewards=[0.0, 1.0, 0.5, 0.5])
    got = signal_metrics("gigpo", alike, AdvantageConfig(gamma=1.0))
    assert got["signal/zero_adv_step_groups"] == 1.0 and got["signal/zero_adv_groups"] == 1.0
    assert got["signal/zero_adv_turns"] == 1.0
