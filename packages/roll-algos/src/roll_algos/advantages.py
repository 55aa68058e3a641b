"""The types of the advantage family: every estimator is
`fn(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput`.

The registry and `compute_advantages`, the one caller of estimators, are in `roll_algos.registry`. The
builtin estimators (the `AdvantageEstimator` names) live in `roll_algos.estimators` and `roll_algos.gigpo`
and register on import; `register_estimator` adds others under any new name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import torch

from roll_algos.errors import AlgosError, ShapeError, check_shape
from roll_algos.rewards import NormMode, unique_first

__all__ = [
    "AdvantageConfig",
    "AdvantageEstimator",
    "AdvantageInputs",
    "AdvantageOutput",
    "validate_inputs",
]


class AdvantageEstimator(StrEnum):
    """The builtin estimators' names (others register under any name). See docs/algos/<name>.md."""

    GAE = "gae"
    REINFORCE = "reinforce"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    GIGPO = "gigpo"
    STEP_REINFORCE = "step_reinforce"
    AGENTIC_REINFORCE = "agentic_reinforce"


class AdvantageInputs(NamedTuple):
    """The one input shape of every estimator. B rows (one per agent turn), T tokens per row.

    Attributes:
        response_mask: [B, T] bool, True on the row's generated (trained) tokens.
        token_rewards: [B, T] float, rewards placed on tokens (the turn's env reward on its last
            response token); read by the token-level estimators gae and reinforce_plus_plus.
        episode_scores: [B] float, the trajectory's score, repeated on each of its rows.
        step_rewards: [B] float, env reward of this row's turn.
        trajectory_ids: [B] long, shared by the rows of one trajectory.
        group_ids: [B] long, shared by the trajectories of one env group (same env seed).
        step_ids: [B] long, turn index inside the trajectory (0-based; orders the rows).
        anchor_ids: [B] long, hash of the observation the turn acted on (GiGPO); -1 when unknown.
        values: [B, T] critic values (gae only).
        old_log_probs: [B, T] behaviour-policy log-probs (reinforce_plus_plus KL-in-reward).
        ref_log_probs: [B, T] reference-policy log-probs (reinforce_plus_plus KL-in-reward).
        anchor_texts: B observation texts the anchor_ids were hashed from (GiGPO's similarity anchors,
            read only with gigpo_anchor_threshold < 1); None when not given.
    """

    response_mask: torch.Tensor
    token_rewards: torch.Tensor
    episode_scores: torch.Tensor
    step_rewards: torch.Tensor
    trajectory_ids: torch.Tensor
    group_ids: torch.Tensor
    step_ids: torch.Tensor
    anchor_ids: torch.Tensor
    values: torch.Tensor | None = None
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    anchor_texts: Sequence[str] | None = None


@dataclass(frozen=True)
class AdvantageConfig:
    """Parameters of every estimator (each reads the ones it needs; all defaulted).

    Attributes:
        gamma: discount. Per token for gae / reinforce_plus_plus / grpo / reinforce, per env step for
            gigpo / step_reinforce / agentic_reinforce.
        lambd: GAE lambda.
        norm_mode: `mean_std`, `mean` or `none`: how scores are normalised (within the env group for
            grpo / step_reinforce, over the batch's valid tokens for gae / reinforce_plus_plus).
        epsilon: added to std before dividing.
        gigpo_step_weight: omega >= 0, weight of GiGPO's step (anchor-state) advantage.
        gigpo_norm_mode: GiGPO normalisation (`mean_std` or `mean`); None uses norm_mode.
        gigpo_anchor_threshold: in (0, 1]; below 1, GiGPO merges the anchors of similar observation texts
            (`AdvantageInputs.anchor_texts`) of one env group (`anchor_ids_from_texts`); 1: exact anchors.
        gigpo_anchor_similarity: `jaccard` (token sets) or `difflib` (SequenceMatcher ratio).
        kl_coef: beta of the KL penalty folded into the reward (reinforce_plus_plus).
        kl_estimator: per-token KL estimator for that penalty (`kl`, `abs`, `mse`, `k3`).
        whiten: whiten the final advantages over the batch's valid tokens.
        advantage_clip: clamp the final advantages to [-c, c]; None disables.
        reward_clip: clamp token_rewards, step_rewards and episode_scores to [-c, c] first; None disables.
    """

    gamma: float = 1.0
    lambd: float = 1.0
    norm_mode: str = "mean_std"
    epsilon: float = 1e-6
    gigpo_step_weight: float = 1.0
    gigpo_norm_mode: str | None = None
    gigpo_anchor_threshold: float = 1.0
    gigpo_anchor_similarity: str = "jaccard"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    whiten: bool = False
    advantage_clip: float | None = None
    reward_clip: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise AlgosError(f"AdvantageConfig.gamma: expected a value in [0, 1], got {self.gamma}.")
        if not 0.0 <= self.lambd <= 1.0:
            raise AlgosError(f"AdvantageConfig.lambd: expected a value in [0, 1], got {self.lambd}.")
        for field in ("norm_mode", "gigpo_norm_mode"):
            mode = getattr(self, field)
            if mode is not None and mode not in {m.value for m in NormMode}:
                raise AlgosError(f"AdvantageConfig.{field}: expected mean_std, mean or none, got {mode!r}.")
        if self.epsilon < 0 or self.kl_coef < 0 or self.gigpo_step_weight < 0:
            raise AlgosError(
                "AdvantageConfig: epsilon, kl_coef and gigpo_step_weight must be >= 0, got"
                f" {self.epsilon}, {self.kl_coef} and {self.gigpo_step_weight}."
            )
        if not 0.0 < self.gigpo_anchor_threshold <= 1.0:
            raise AlgosError(
                f"AdvantageConfig.gigpo_anchor_threshold: expected a value in (0, 1], got {self.gigpo_anchor_threshold}."
            )
        if self.gigpo_anchor_similarity not in ("jaccard", "difflib"):
            raise AlgosError(
                "AdvantageConfig.gigpo_anchor_similarity: expected jaccard or difflib, got"
                f" {self.gigpo_anchor_similarity!r}."
            )


class AdvantageOutput(NamedTuple):
    """Result of every estimator.

    Attributes:
        advantages: [B, T] float, zero off the response mask.
        returns: [B, T] float, the critic's regression target for gae (A + V); for the other
            estimators the (unnormalised where defined) return each token was credited with.
    """

    advantages: torch.Tensor
    returns: torch.Tensor


def validate_inputs(inputs: AdvantageInputs) -> None:
    """Check shapes and per-trajectory consistency; raise `ShapeError` saying what to fix."""
    check_shape("response_mask", inputs.response_mask, [None, None], hint="One row per turn: [B, T] bool.")
    b, t = inputs.response_mask.shape
    if inputs.response_mask.dtype != torch.bool:
        raise ShapeError(
            f"response_mask: expected dtype torch.bool, got {inputs.response_mask.dtype}. Use mask.bool()."
        )
    check_shape("token_rewards", inputs.token_rewards, [b, t], hint="Same [B, T] as response_mask.")
    for name in ("episode_scores", "step_rewards", "trajectory_ids", "group_ids", "step_ids", "anchor_ids"):
        check_shape(name, getattr(inputs, name), [b], hint="One value per row: [B].")
    for name in ("values", "old_log_probs", "ref_log_probs"):
        if getattr(inputs, name) is not None:
            check_shape(name, getattr(inputs, name), [b, t], hint="Same [B, T] as response_mask.")
    if inputs.anchor_texts is not None and len(inputs.anchor_texts) != b:
        raise ShapeError(
            f"anchor_texts: expected {b} texts (one per row), got {len(inputs.anchor_texts)}. Give each row's"
            " observation text, or None."
        )
    first, inverse = unique_first(inputs.trajectory_ids)
    for name in ("episode_scores", "group_ids"):
        x = getattr(inputs, name)
        if not torch.equal(x[first][inverse], x):
            raise ShapeError(
                f"{name}: expected one value per trajectory (repeated on each of its rows), got rows of one "
                "trajectory_id with different values. Check trajectory_ids, or fill the trajectory's value on every row."
            )
