"""`AlgorithmFields`: the top-level keys of `AgenticConfig` that choose and tune the RL algorithm: the advantage
estimator and its discount, the policy loss with its importance ratio and clipping, the KL term (reward penalty,
loss term, estimator, reference, adaptive controller), the entropy bonus, GiGPO's step advantage and anchors, the
clamps of advantages and rewards, and how token losses aggregate; with the check that the named estimator and
policy loss are registered in roll_algos, and the values derived from these keys alone (the clip range, whether
a KL term needs the reference, whether the estimator needs a critic). `AgenticConfig` inherits these fields, so
they stay flat keys of the run's YAML; their defaults live here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from roll_algos import DEFAULT_POLICY_LOSS, FULL_KL_KINDS, estimator_spec

from roll_pipeline.config.checks import estimator_problem, policy_loss_problem
from roll_pipeline.config.roles import StrictModel

__all__ = ["AlgorithmFields"]

LossAggModeName = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]


class AlgorithmFields(StrictModel):
    """The algorithm's keys: estimator, policy loss and ratio clipping, KL, entropy, GiGPO, clamps."""

    adv_estimator: str = Field(
        "gigpo",
        description="advantage estimator: a name registered in roll_algos (the builtins grpo, reinforce, gae,"
        " reinforce_plus_plus, gigpo, step_reinforce, agentic_reinforce, or a plugin's: docs/algos/registry.md)",
    )
    ppo_epochs: int = Field(1, ge=1, description="passes over each rollout")
    model_update_frequency: int = Field(
        1,
        ge=1,
        description="sync the trained weights to actor_infer every this many steps (bucketed, versioned); in"
        " between, the rollout samples from the last synced version",
    )
    recompute_old_log_probs: bool = Field(
        False,
        description="recompute the rollout's log-probs with the training model; false reuses the sampler's"
        " (exact when both run the same weights and numerics, e.g. HF on the CPU; set true for bf16, and a vllm"
        " actor_infer requires it)."
        " With async_generation_ratio > 0, false makes the PPO ratio pi / pi_behaviour (the clip bounds the"
        " off-policy ratio); true makes it pi / pi_current and tis_cap corrects pi_current / pi_behaviour",
    )
    tis_cap: float | None = Field(
        None,
        gt=0,
        description="truncated importance sampling: weight each token's policy loss by"
        " min(exp(old_log_prob - inference_log_prob), tis_cap) (needs recompute_old_log_probs; null: off)",
    )
    gamma: float = Field(
        0.9,
        ge=0,
        le=1,
        description="discount (below 1: shorter paths to the goal score higher); per env step for gigpo /"
        " step_reinforce / agentic_reinforce, per token for the others",
    )
    lambd: float = Field(1.0, ge=0, le=1, description="GAE lambda (gae only)")
    policy_loss: str = Field(
        DEFAULT_POLICY_LOSS,
        description="policy loss, a name registered in roll_algos: ppo (PPO's clipped surrogate on ratio_level's"
        " ratio), gspo (GSPO: one length-normalised ratio per sequence; a clip range above 1e-2 is refused:"
        " pg_clip_low=3e-4, pg_clip_high=4e-4 as in the paper; no skip_confident_tokens), or a plugin's"
        " (docs/algos/policy_loss.md)",
    )
    pg_clip: float = Field(0.2, gt=0, description="PPO ratio clip range")
    pg_clip_low: float | None = Field(None, gt=0, description="lower clip range (default pg_clip)")
    pg_clip_high: float | None = Field(None, gt=0, description="upper clip range (default pg_clip)")
    dual_clip_loss: bool = Field(False, description="dual-clip PPO (c=3) for negative advantages")
    ratio_level: Literal["token", "segment", "sequence"] = Field(
        "token",
        description="importance ratio of the PPO loss: per token (PPO), per segment (one per turn: exp of the"
        " turn's mean log-ratio), per sequence (GSPO: one per training row; use small clip ranges)",
    )
    init_kl_coef: float = Field(
        0.0,
        ge=0,
        description="KL(actor || reference) as a reward penalty with this coefficient: r_t - coef * KL_t on each"
        " response token, and the turn's / episode's summed penalty on step rewards and scores, so every"
        " estimator sees it; 0: off",
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description="adaptive KL controller (Ziegler et al.): steer the measured KL per token towards this by"
        " scaling the KL coefficients in use (init_kl_coef, kl_loss_coef); null: fixed coefficients",
    )
    kl_horizon: int = Field(10000, ge=1, description="adaptive KL horizon, in trajectories (needs target_kl)")
    kl_penalty: Literal["kl", "abs", "mse", "k3", "full", "full_forward"] = Field(
        "k3",
        description="per-token KL estimator of the reward penalty, the loss term and the measured KL; k3, kl, abs"
        " and mse read the sampled tokens' log-probs; full is the exact KL(actor || reference) over the vocabulary,"
        " full_forward the exact KL(reference || actor): it pulls back a token the actor has given up in"
        " proportion to the reference's probability of it (keeps exploring). The exact ones run in the trainer"
        " against a frozen reference copy there (one more model in its memory, activations O(chunk x"
        " vocabulary); docs/training.md)",
    )
    kl_reference: Literal["pretrained", "rl_start"] = Field(
        "pretrained",
        description="the KL term's reference weights: pretrain's, or rl_start: the actor's as the first RL step"
        " starts (after demonstration_steps: the clone; with none, pretrain's); rl_start needs a KL term",
    )
    use_kl_loss: bool = Field(True, description="add kl_loss_coef * KL(actor || reference) to the loss")
    kl_loss_coef: float = Field(0.01, ge=0, description="weight of the KL loss term")
    entropy_loss_coef: float = Field(
        0.0,
        ge=0,
        description="entropy bonus; 0 by default: over every response token it also randomises the answer "
        "format, while the KL term alone keeps the policy near the reference",
    )
    entropy_scope: Literal["response", "decision", "turn_max"] = Field(
        "response",
        description="the tokens the entropy bonus covers (actor/entropy is their mean): every response token;"
        " decision: those the policy-gradient term trains on (needs skip_confident_tokens), so the answer format"
        " stays sharp; turn_max: each turn's token of largest entropy (its choice), kept however sure it grows",
    )
    whiten_advantages: bool = Field(
        True,
        description="whiten advantages over the batch's response tokens; also removes their mean, whose"
        " steady sign (failing episodes have more turns) AdamW turns into a drift of every unsampled token",
    )
    skip_confident_tokens: float | None = Field(
        None,
        gt=0,
        le=1,
        description="leave out of the policy-gradient term the response tokens the old policy drew with"
        " probability >= this (format tokens: no decision, only noise that AdamW scales up); null trains all",
    )
    skip_confident_by: Literal["sampler", "reference"] = Field(
        "sampler",
        description="whose probability of a token skip_confident_tokens compares: the sampler's (the policy"
        " that drew it), or the reference model's (fixed for the run: a format token stays out however the"
        " policy drifts, and a decision the policy grew sure of stays in; needs use_kl_loss)",
    )
    norm_mean_type: Literal["mean_std", "mean", "none"] = Field("mean_std", description="group normalisation")
    gigpo_step_weight: float = Field(
        1.0, ge=0, description="gigpo: omega, the weight of the step (anchor-state) advantage"
    )
    gigpo_norm_mode: Literal["mean_std", "mean"] | None = Field(
        None,
        description="gigpo: normalisation of both its levels, std-normalised or mean-only; null: norm_mean_type",
    )
    gigpo_anchor_threshold: float = Field(
        1.0,
        gt=0,
        le=1,
        description="gigpo: merge the anchor states of similar observations of an env group (similarity >="
        " this, docs/algos/gigpo.md#anchors); 1: exact anchors (equal observations only)",
    )
    gigpo_anchor_similarity: Literal["jaccard", "difflib"] = Field(
        "jaccard",
        description="gigpo: observation similarity of gigpo_anchor_threshold: jaccard (word/punctuation sets)"
        " or difflib (SequenceMatcher ratio)",
    )
    advantage_clip: float | None = Field(None, gt=0, description="clamp advantages to [-c, c]")
    reward_clip: float | None = Field(None, gt=0, description="clamp rewards to [-c, c]")
    loss_agg_mode: LossAggModeName = Field("seq-mean-token-mean", description="how token losses aggregate")

    @field_validator("adv_estimator", "policy_loss")
    @classmethod
    def _registered(cls, name: str, info: ValidationInfo) -> str:
        check = estimator_problem if info.field_name == "adv_estimator" else policy_loss_problem
        if problem := check(name):
            raise ValueError(problem)
        return name

    @property
    def uses_reference(self) -> bool:
        """Whether a KL term (the loss's or the reward penalty's) reads the reference model."""
        return (self.use_kl_loss and self.kl_loss_coef > 0) or self.init_kl_coef > 0

    @property
    def uses_critic(self) -> bool:
        """Whether `adv_estimator` declares that it needs a critic (its registered `needs_critic`)."""
        return estimator_spec(self.adv_estimator).needs_critic

    @property
    def reference_in_trainer(self) -> bool:
        """Whether the reference is a frozen copy inside actor_train: an exact KL needs both models' logits."""
        return self.uses_reference and self.kl_penalty in FULL_KL_KINDS

    @property
    def clip_range(self) -> tuple[float, float]:
        """(low, high) of the PPO ratio clip: `pg_clip_low` / `pg_clip_high` where set, else `pg_clip`."""
        low, high = self.pg_clip_low, self.pg_clip_high
        return (self.pg_clip if low is None else low, self.pg_clip if high is None else high)
