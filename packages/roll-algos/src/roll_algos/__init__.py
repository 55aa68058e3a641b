"""roll-algos: RL maths for LLM agents: advantages, losses, KL, packing, dynamic batching.

Pure functions on tensors (torch, numpy only). Families share one call shape:
- advantages: `compute_advantages(estimator, AdvantageInputs, AdvantageConfig) -> AdvantageOutput`, every
  estimator `fn(AdvantageInputs, AdvantageConfig) -> AdvantageOutput` in an open registry
  (`register_estimator(name, level=..., group_based=...)`, entry-point group `roll_algos.estimators`);
- losses: `policy_loss(...) -> PolicyLossOutput`, `value_loss(...) -> ValueLossOutput`, `aggregate_loss`;
- policy losses by name: `compute_policy_loss(name, PolicyLossInputs, PolicyLossConfig) -> PolicyLossOutput`,
  every loss `fn(PolicyLossInputs, PolicyLossConfig) -> PolicyLossOutput` in an open registry
  (`register_policy_loss(name)`, entry-point group `roll_algos.policy_losses`): `ppo` (default), `gspo`, `sft`
  (behaviour cloning);
- KL: `kl_penalty`, `apply_kl_penalty`, `token_kl`, fixed / adaptive controllers;
- objectives the train workers run: `ActorLoss` (PPO family + KL + entropy), `CriticLoss`, on a `MicroBatch`;
- packing and dynamic batching: `pack_sequences`, `dynamic_micro_batches`, `balance_partitions`.
"""

from roll_algos import estimators as _estimators  # noqa: F401  (registers the estimators)
from roll_algos import gigpo as _gigpo  # noqa: F401  (registers gigpo)
from roll_algos import gspo as _gspo  # noqa: F401  (registers the gspo policy loss)
from roll_algos import sft as _sft  # noqa: F401  (registers the sft policy loss)
from roll_algos.advantages import (
    AdvantageConfig,
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutput,
)
from roll_algos.batching import (
    DynamicBatchPlan,
    balance_partitions,
    dynamic_micro_batches,
    karmarkar_karp,
    padding_stats,
)
from roll_algos.errors import AlgosError, ShapeError
from roll_algos.gigpo import anchor_ids_from_texts, cluster_representatives
from roll_algos.gspo import GSPO_PAPER_CLIP, gspo_clip_problem
from roll_algos.kl import AdaptiveKLController, FixedKLController, KLEstimator, apply_kl_penalty, kl_penalty
from roll_algos.logits import entropy_from_logits, log_probs_from_logits
from roll_algos.losses import (
    LossAggMode,
    PolicyLossOutput,
    RatioLevel,
    ValueLossOutput,
    aggregate_loss,
    clipped_policy_loss,
    contiguous_segments,
    policy_loss,
    value_loss,
)
from roll_algos.micro_batch import MicroBatch
from roll_algos.objectives import FULL_KL_KINDS, ActorLoss, CriticLoss, skipped_tokens_problem, token_kl
from roll_algos.packing import PackedBatch, pack_sequences, packed_attention_mask, unpack, unpack_padded
from roll_algos.policy_losses import (
    DEFAULT_POLICY_LOSS,
    POLICY_LOSSES,
    PolicyLossConfig,
    PolicyLossInputs,
    PolicyLossSpec,
    compute_policy_loss,
    get_policy_loss,
    load_policy_loss_plugins,
    policy_loss_spec,
    register_policy_loss,
    registered_policy_losses,
)
from roll_algos.registry import (
    ADVANTAGE_ESTIMATORS,
    EstimatorSpec,
    compute_advantages,
    estimator_spec,
    get_estimator,
    load_estimator_plugins,
    register_estimator,
    registered_estimators,
)
from roll_algos.rewards import (
    NormMode,
    clip_advantages,
    clip_rewards,
    group_index,
    group_normalize,
    masked_mean,
    masked_var,
    masked_whiten,
    starpo_group_filter,
)

__version__ = "0.2.0"
__all__: list[str] = [
    "ADVANTAGE_ESTIMATORS",
    "DEFAULT_POLICY_LOSS",
    "FULL_KL_KINDS",
    "GSPO_PAPER_CLIP",
    "POLICY_LOSSES",
    "ActorLoss",
    "AdaptiveKLController",
    "AdvantageConfig",
    "AdvantageEstimator",
    "AdvantageInputs",
    "AdvantageOutput",
    "AlgosError",
    "CriticLoss",
    "DynamicBatchPlan",
    "EstimatorSpec",
    "FixedKLController",
    "KLEstimator",
    "LossAggMode",
    "MicroBatch",
    "NormMode",
    "PackedBatch",
    "PolicyLossConfig",
    "PolicyLossInputs",
    "PolicyLossOutput",
    "PolicyLossSpec",
    "RatioLevel",
    "ShapeError",
    "ValueLossOutput",
    "__version__",
    "aggregate_loss",
    "anchor_ids_from_texts",
    "apply_kl_penalty",
    "balance_partitions",
    "clip_advantages",
    "clip_rewards",
    "clipped_policy_loss",
    "cluster_representatives",
    "compute_advantages",
    "compute_policy_loss",
    "contiguous_segments",
    "dynamic_micro_batches",
    "entropy_from_logits",
    "estimator_spec",
    "get_estimator",
    "get_policy_loss",
    "group_index",
    "group_normalize",
    "gspo_clip_problem",
    "karmarkar_karp",
    "kl_penalty",
    "load_estimator_plugins",
    "load_policy_loss_plugins",
    "log_probs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "pack_sequences",
    "packed_attention_mask",
    "padding_stats",
    "policy_loss",
    "policy_loss_spec",
    "register_estimator",
    "register_policy_loss",
    "registered_estimators",
    "registered_policy_losses",
    "skipped_tokens_problem",
    "starpo_group_filter",
    "token_kl",
    "unpack",
    "unpack_padded",
    "value_loss",
]
