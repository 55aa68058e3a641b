"""Where a step's learning signal is: the share of groups whose advantages are all zero, which teach nothing.

A group-relative estimator (grpo, GiGPO's episode term) gives a group whose samples all scored alike a zero
advantage on every token, whatever the learning rate: once a policy plays the same moves in every sample of
a group, RL stalls there. These metrics say how much of a batch that is, read from the estimator's own
advantages before the batch-wide whitening and clipping (whitening shifts a zero group to a constant, which
trains nothing either). GiGPO's step term compares the turns of an env group that acted on one observation
(an anchor-state group); a group of one has nothing to compare with.

- `signal/zero_adv_groups`: env groups whose every response token has a zero advantage, over env groups;
- `signal/zero_adv_turns`: turns (training turns of any shape) with a zero advantage on every token;
- gigpo only: `signal/zero_adv_step_groups`, anchor-state groups of two or more turns whose step advantages
  are all zero, over such groups; `signal/singleton_step_turns`, turns alone in their anchor-state group.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from roll_algos import AdvantageConfig, AdvantageEstimator, AdvantageInputs, compute_advantages, group_index
from roll_algos.estimators import step_returns
from roll_algos.gigpo import UNKNOWN_ANCHOR, gigpo_step_advantages, similar_anchor_ids

__all__ = ["ZERO_ADVANTAGE", "signal_metrics"]

ZERO_ADVANTAGE = 1e-6
"""|A| at or below this counts as zero (group normalisation divides a zero spread by std + epsilon)."""


def _all_zero_by(zero: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """[count] bool: whether every element of each group of `index` is `zero`."""
    nonzero = torch.zeros(count, dtype=torch.long).index_add_(0, index, (~zero).long())
    return nonzero == 0


def _step_group_metrics(inputs: AdvantageInputs, config: AdvantageConfig) -> dict[str, float]:
    """GiGPO's anchor-state groups: those of 2+ turns with no step advantage, and the turns alone in one."""
    anchors = inputs.anchor_ids
    if config.gigpo_anchor_threshold < 1.0:
        anchors = similar_anchor_ids(inputs, config.gigpo_anchor_threshold, config.gigpo_anchor_similarity)
    known = anchors != UNKNOWN_ANCHOR
    if not bool(known.any()):
        return {"signal/zero_adv_step_groups": 0.0, "signal/singleton_step_turns": 1.0}
    mode = config.gigpo_norm_mode or config.norm_mode
    step = gigpo_step_advantages(
        step_returns(inputs, config.gamma), inputs.group_ids, anchors, mode, config.epsilon
    )[known]
    index, count = group_index(inputs.group_ids[known], anchors[known])
    sizes = torch.bincount(index, minlength=count)
    compared = sizes >= 2
    zero = _all_zero_by(step.abs() <= ZERO_ADVANTAGE, index, count)
    singletons = int(sizes[~compared].sum()) + int((~known).sum())
    return {
        "signal/zero_adv_step_groups": float((zero & compared).sum()) / max(int(compared.sum()), 1),
        "signal/singleton_step_turns": singletons / max(int(anchors.numel()), 1),
    }


def signal_metrics(estimator: str, inputs: AdvantageInputs, config: AdvantageConfig) -> dict[str, float]:
    """The shares of a batch's env groups, turns and (gigpo) anchor-state groups that carry no advantage.

    `inputs` is the turn view the step's estimator runs on (N turns, `AdvantageInputs`); the estimator runs
    again here without whitening and clipping, on a few [N, Q] tensors.
    """
    raw = compute_advantages(estimator, inputs, replace(config, whiten=False, advantage_clip=None)).advantages
    mask = inputs.response_mask.bool()
    zero_turn = ((raw.abs() <= ZERO_ADVANTAGE) | ~mask).all(dim=1)
    groups, count = group_index(inputs.group_ids)
    out = {
        "signal/zero_adv_groups": float(_all_zero_by(zero_turn, groups, count).float().mean()),
        "signal/zero_adv_turns": float(zero_turn.float().mean()),
    }
    if estimator == AdvantageEstimator.GIGPO:
        out.update(_step_group_metrics(inputs, config))
    return out
