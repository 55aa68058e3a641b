"""The one entry into the run's configuration: `AgenticConfig` -> the small settings each component
of a step reads. The components never see the whole config; the entry points (`pipeline.py`,
`serving/evaluate.py`) translate it here:

- `experience_settings` -> `experience.ExperienceSettings` (samples, log-prob passes, KL, advantages);
- `update_schedule` -> `epochs.UpdateSchedule` of the actor or the critic (epochs, order seed, lr decay);
- `actor_loss_template` / `actor_loss` -> the `ActorLoss` of the run (the actor sets each step's KL
  coefficient on the template), `critic_loss` -> its `CriticLoss`;
- `rollout_settings` -> `runtime.rollout.RolloutSettings` (env slots, sampling, scheduler limits);
- `spawn_settings` -> `runtime.workers.SpawnSettings` (which roles get workers, threads, env workers, and
  `share_prefix` for every role's strategy).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from roll_algos import ActorLoss, AdvantageConfig, CriticLoss

from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.runtime.rollout import RolloutSettings, layout_of
from roll_pipeline.runtime.workers import SpawnSettings
from roll_pipeline.trainer.epochs import UpdateSchedule
from roll_pipeline.trainer.experience import ExperienceSettings

__all__ = [
    "ACTOR_SALT",
    "CRITIC_SALT",
    "DUAL_CLIP_C",
    "actor_loss",
    "actor_loss_template",
    "critic_loss",
    "experience_settings",
    "rollout_settings",
    "spawn_settings",
    "update_schedule",
]

DUAL_CLIP_C = 3.0
"""The dual-clip bound c of `dual_clip_loss` (Ye et al. 2020)."""

ACTOR_SALT = 1_000_003
"""The actor's mini-batch order at step s is drawn with seed * ACTOR_SALT + s."""

CRITIC_SALT = 1_000_033
"""The critic's mini-batch order at step s is drawn with seed * CRITIC_SALT + s."""


def experience_settings(config: AgenticConfig) -> ExperienceSettings:
    """What the experience phase of a config's steps reads."""
    return ExperienceSettings(
        sample_shape=config.train_sample_shape,
        recompute_old_log_probs=config.recompute_old_log_probs,
        adv_estimator=config.adv_estimator,
        advantage=AdvantageConfig(
            gamma=config.gamma,
            lambd=config.lambd,
            norm_mode=config.norm_mean_type,
            gigpo_step_weight=config.gigpo_step_weight,
            gigpo_norm_mode=config.gigpo_norm_mode,
            gigpo_anchor_threshold=config.gigpo_anchor_threshold,
            gigpo_anchor_similarity=config.gigpo_anchor_similarity,
            whiten=config.whiten_advantages,
            advantage_clip=config.advantage_clip,
            reward_clip=config.reward_clip,
        ),
        kl_penalty=config.kl_penalty,
        actor_batch_size=config.actor_train.infer_batch_size,
        reference_batch_size=config.reference.infer_batch_size,
        critic_batch_size=config.critic.infer_batch_size,
    )


def update_schedule(config: AgenticConfig, role: Literal["actor_train", "critic"]) -> UpdateSchedule:
    """The update schedule of a trained role (its training_args' lr decay, its own order salt)."""
    targs = (config.actor_train if role == "actor_train" else config.critic).training_args
    return UpdateSchedule(
        ppo_epochs=config.ppo_epochs,
        seed=config.seed,
        salt=ACTOR_SALT if role == "actor_train" else CRITIC_SALT,
        max_steps=config.max_steps,
        lr_scheduler_type=targs.lr_scheduler_type,
        min_lr_ratio=targs.min_lr_ratio,
        max_consecutive_nonfinite_steps=config.max_consecutive_nonfinite_steps,
    )


def actor_loss_template(config: AgenticConfig) -> ActorLoss:
    """The actor loss a config asks for, with its configured KL loss coefficient (0 without use_kl_loss); the
    actor update sets the coefficient the KL controller holds at each step."""
    low, high = config.clip_range
    return ActorLoss(
        clip_low=low,
        clip_high=high,
        dual_clip=DUAL_CLIP_C if config.dual_clip_loss else None,
        agg_mode=config.loss_agg_mode,
        ratio_level=config.ratio_level,
        policy_loss=config.policy_loss,
        kl_loss_coef=config.kl_loss_coef if config.use_kl_loss else 0.0,
        kl_penalty=config.kl_penalty,
        entropy_loss_coef=config.entropy_loss_coef,
        skip_confident_tokens=config.skip_confident_tokens,
        skip_confident_by=config.skip_confident_by,
        entropy_scope=config.entropy_scope,
        tis_cap=config.tis_cap,
        norm_constant=float(config.sequence_length),
    )


def actor_loss(config: AgenticConfig, kl_loss_coef: float) -> ActorLoss:
    """The actor loss a config asks for, with the KL loss coefficient in use now (0 without use_kl_loss)."""
    return replace(actor_loss_template(config), kl_loss_coef=kl_loss_coef if config.use_kl_loss else 0.0)


def critic_loss(config: AgenticConfig) -> CriticLoss:
    """The critic's value loss of a config (clipped around the old values by `value_clip`)."""
    return CriticLoss(config.value_clip)


def rollout_settings(config: AgenticConfig) -> RolloutSettings:
    """What the rollout setup of a config reads (`runtime.rollout.build_scheduler`, `sampling_of`)."""
    return RolloutSettings(
        envs=config.custom_envs,
        generating=config.actor_infer.generating_args,
        sequence_length=config.sequence_length,
        async_generation_ratio=config.async_generation_ratio,
        batch_timeout_s=config.rollout_batch_timeout_s,
        filter_ratio=config.rollout_filter_ratio,
    )


def spawn_settings(cfg: AgenticConfig) -> SpawnSettings:
    """The worker roles (`AgenticConfig.spawned_roles`), their thread share, the env workers of both
    rollouts, and the run's `share_prefix`."""
    roles = {"actor_train": cfg.actor_train, "actor_infer": cfg.actor_infer, "reference": cfg.reference}
    if cfg.uses_critic:
        roles["critic"] = cfg.critic
    return SpawnSettings(
        roles=roles,
        names=cfg.spawned_roles,
        backend=cfg.cluster.backend,
        # while the actor trains, an asynchronous rollout keeps the inference role busy: split the cores
        thread_share=0.5 if cfg.async_generation_ratio > 0 else 1.0,
        env_workers=sum(layout_of(m).num_workers for m in (cfg.train_env_manager, cfg.val_env_manager)),
        share_prefix=cfg.share_prefix,
    )
