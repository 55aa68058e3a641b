"""The one translation of the run's configuration: `run_settings` turns an `AgenticConfig` into one frozen
`RunSettings`, which the parts (`parts.py`) and the loop (`pipeline.py`) read instead of the config. Its
pieces are the small settings each component takes:

- `experience_settings` -> `experience.ExperienceSettings` (samples, log-prob passes, KL, advantages);
- `update_schedule` -> `epochs.UpdateSchedule` of the actor or the critic (epochs, order seed, lr decay);
- `actor_loss_template` / `actor_loss` -> the `ActorLoss` of the run (the actor sets each step's KL
  coefficient on the template), `critic_loss` -> its `CriticLoss`;
- `rollout_settings` -> `runtime.rollout.RolloutSettings` (env slots, sampling, scheduler limits);
- `spawn_settings` -> `runtime.workers.SpawnSettings` (which roles get workers, threads, env workers, and
  `share_prefix` for every role's strategy);
- `config_model`: the model folder the config's roles load (for the commands that load a model without a run).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from roll_algos import ActorLoss, AdvantageConfig, CriticLoss

from roll_pipeline.config.envs import EnvManagerConfig
from roll_pipeline.config.roles import ClusterConfig
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.runtime.placement import plan_placement, roles_model
from roll_pipeline.runtime.rollout import RolloutSettings, layout_of
from roll_pipeline.runtime.workers import SpawnSettings
from roll_pipeline.trainer.demonstration import sft_loss
from roll_pipeline.trainer.epochs import UpdateSchedule
from roll_pipeline.trainer.experience import ExperienceSettings

__all__ = [
    "ACTOR_SALT",
    "CRITIC_SALT",
    "DUAL_CLIP_C",
    "LoopSettings",
    "OutputSettings",
    "RunSettings",
    "actor_loss",
    "actor_loss_template",
    "concrete_dtypes",
    "config_model",
    "critic_loss",
    "experience_settings",
    "rollout_settings",
    "run_settings",
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
        # demonstration_env_manager, when set, has env workers of its own beside the other two
        env_workers=sum(
            layout_of(m).num_workers
            for m in (cfg.train_env_manager, cfg.val_env_manager, cfg.demonstration_env_manager)
            if m
        ),
        share_prefix=cfg.share_prefix,
        reference_in_trainer=cfg.reference_in_trainer,
    )


def config_model(config: AgenticConfig, roles: tuple[str, ...] = ("actor_infer",)) -> Path | str:
    """The model folder the config's `roles` load (`runtime.placement.roles_model`)."""
    assert config.pretrain is not None  # AgenticConfig refuses a config without a model
    return roles_model(config.pretrain, config.seed, {name: getattr(config, name) for name in roles})


@dataclass(frozen=True)
class OutputSettings:
    """Where a run writes: its folder, checkpoints, trackers and renders."""

    run_dir: Path  # output_dir / exp_name
    config_json: dict[str, Any]  # the whole config, which the trackers record beside the run
    keep_last_n: int | None
    resume_from_checkpoint: str | None
    track_with: list[str]
    tracker_kwargs: dict[str, Any]
    render_save_dir: str | None
    render_episodes_per_tag: int


@dataclass(frozen=True)
class LoopSettings:
    """What the training loop reads: its length, cadences and batch sizes (in trajectories)."""

    max_steps: int
    eval_steps: int
    logging_steps: int
    save_steps: int
    validate_at_start: bool
    train_rollout_batch_size: int
    val_rollout_batch_size: int
    val_subset_size: int | None  # the episodes of every validation but the one at max_steps (None: all)
    critic_warmup: int  # steps the actor stays frozen while the critic learns
    max_consecutive_skipped_steps: int

    def val_passes(self, step: int) -> tuple[int, ...]:
        """The episodes of each pass of the validation after `step`: the subset alone, or at max_steps the
        subset and then all (the curve stays on the same episodes, and the end is measured on all)."""
        subset, every = self.val_subset_size, self.val_rollout_batch_size
        if subset is None:
            return (every,)
        return (subset, every) if step == self.max_steps else (subset,)


@dataclass(frozen=True)
class RunSettings:
    """A run's whole configuration, translated once (`run_settings`): what its parts and loop read."""

    seed: int
    pretrain: str
    cluster: ClusterConfig
    use_kl_loss: bool
    kl_reference: Literal["pretrained", "rl_start"]  # rl_start: the actor's weights at the first RL step
    model_update_frequency: int
    demonstration_steps: int
    outputs: OutputSettings
    loop: LoopSettings
    spawn: SpawnSettings
    rollout: RolloutSettings
    train_envs: EnvManagerConfig
    val_envs: EnvManagerConfig
    demonstration_envs: EnvManagerConfig  # demonstration_env_manager, else train_envs
    experience: ExperienceSettings
    # `KLControl`'s reward and loss coefficients, target and horizon
    kl_coefs: tuple[float, float, float | None, int]
    actor_loss: ActorLoss  # the template: the actor update sets the KL coefficient of each step
    actor_schedule: UpdateSchedule
    critic_loss: CriticLoss
    critic_schedule: UpdateSchedule
    demonstration_loss: ActorLoss  # sft on every response token (`trainer.demonstration.sft_loss`)
    demonstration_schedule: UpdateSchedule  # the actor's, at demonstration_learning_rate


T = TypeVar("T")


def _picked(cls: type[T], config: AgenticConfig, **derived: Any) -> T:
    """A `cls` whose fields are the config's fields of the same names, but for those `derived` gives."""
    picked = {f.name: getattr(config, f.name) for f in fields(cls) if f.name not in derived}  # type: ignore[arg-type]
    return cls(**picked, **derived)


def concrete_dtypes(config: AgenticConfig, log: Callable[[str], None] = print) -> AgenticConfig:
    """`config` with each role's `model_args.dtype: auto` replaced by what its device computes natively
    (`roll_strategies.choose_dtype`), each choice logged once; every part of the run then reads a concrete
    dtype."""
    from roll_strategies import choose_dtype

    roles = {name: getattr(config, name) for name in ("actor_train", "actor_infer", "reference", "critic")}
    auto = {name: role for name, role in roles.items() if role.model_args.dtype == "auto"}
    placements = plan_placement(auto, config.cluster.backend)
    update, chosen = {}, defaultdict(list)
    for name, role in auto.items():
        dtype, why = choose_dtype("auto", placements[name].device)
        chosen[(dtype, why)].append(name)
        model_args = role.model_args.model_copy(update={"dtype": dtype})
        update[name] = role.model_copy(update={"model_args": model_args})
    for (dtype, why), names in chosen.items():
        log(f"[roll] model_args.dtype auto -> {dtype} for {', '.join(names)} ({why})")
    return config.model_copy(update=update) if update else config


def run_settings(config: AgenticConfig, log: Callable[[str], None] = print) -> RunSettings:
    """The `RunSettings` of a config, `dtype: auto` resolved per role (`concrete_dtypes`, logged by `log`)."""
    c = concrete_dtypes(config, log)
    assert c.pretrain is not None  # AgenticConfig refuses a config without a model
    actor_schedule, actor = update_schedule(c, "actor_train"), actor_loss_template(c)
    demo_rate = c.demonstration_learning_rate / c.actor_train.training_args.learning_rate
    return _picked(
        RunSettings,
        c,
        outputs=_picked(
            OutputSettings, c, run_dir=Path(c.output_dir) / c.exp_name, config_json=c.model_dump(mode="json")
        ),
        loop=_picked(LoopSettings, c),
        spawn=spawn_settings(c),
        rollout=rollout_settings(c),
        train_envs=c.train_env_manager,
        val_envs=c.val_env_manager,
        demonstration_envs=c.demonstration_envs,
        experience=experience_settings(c),
        kl_coefs=(c.init_kl_coef, c.kl_loss_coef if c.use_kl_loss else 0.0, c.target_kl, c.kl_horizon),
        actor_loss=actor,
        actor_schedule=actor_schedule,
        critic_loss=critic_loss(c),
        critic_schedule=update_schedule(c, "critic"),
        demonstration_loss=sft_loss(actor),
        demonstration_schedule=replace(actor_schedule, lr_factor=demo_rate),
    )
