"""A run's parts, built from its config once: the model folder and tokenizer, the cluster, the checkpoints and
resume state, the tracker, each role's workers from its plan (`assembly.roles`), the rollouts, and the step's
components (experience, updates, weight sync). `AgenticPipeline` runs the loop over them; `roll eval` and
`roll serve` build their inference server here too."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from roll_rollout import RemotePolicy, RolloutScheduler

from roll_pipeline.assembly import settings
from roll_pipeline.assembly.roles import concrete_dtypes, config_model, plan_roles
from roll_pipeline.config.colocation import infer_sleep, offloaded_roles
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.render import EpisodeRenderer, env_sources, renderer_of
from roll_pipeline.observe.tracking import Tracker
from roll_pipeline.runtime.cluster import Cluster, make_cluster
from roll_pipeline.runtime.infer_sleep import InferSleeper
from roll_pipeline.runtime.placement import CpuPlan, plan_placement, strategy_kwargs
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.runtime.rollout import RolloutSettings, build_scheduler
from roll_pipeline.runtime.storage import confirm_shared_storage
from roll_pipeline.runtime.trainer_offload import TrainerOffloader
from roll_pipeline.runtime.workers import RolePlan, RoleSpawner
from roll_pipeline.state.checkpoint import CheckpointManager
from roll_pipeline.state.run_state import read_resume_state
from roll_pipeline.trainer.actor_update import ActorUpdater
from roll_pipeline.trainer.critic_update import CriticUpdater
from roll_pipeline.trainer.experience import ExperienceMaker
from roll_pipeline.trainer.kl_control import KLControl
from roll_pipeline.trainer.micro_batches import TrainLayout
from roll_pipeline.trainer.weight_update import WeightUpdater, pick_transport

__all__ = ["RunParts", "Workers", "assemble", "build_updaters", "inference_server"]


@dataclass
class Workers:
    """The role workers of a run and the step components that call them."""

    plans: dict[str, RolePlan]
    cpus: CpuPlan
    actor_train: RankGroup
    critic: RankGroup | None
    policy_server: Any
    reference: RankGroup | None  # the worker holding the reference model (the train worker for an exact KL)
    infer_sleep: InferSleeper
    kl: KLControl
    rollout_settings: RolloutSettings
    train_rollout: RolloutScheduler
    val_rollout: RolloutScheduler
    make_experience: ExperienceMaker
    update_weights: WeightUpdater
    trainer_offload: TrainerOffloader
    demo_rollout: RolloutScheduler | None = None  # the demonstrated episodes of `demonstration_steps`


@dataclass
class RunParts:
    """Everything a run is made of before its first step."""

    run_dir: Path
    model_path: Path | str
    tokenizer: Any
    cluster: Cluster
    checkpoints: CheckpointManager
    resume_from: Path | None
    resume_state: dict[str, Any] | None
    tracker: Tracker
    renderer: EpisodeRenderer | None
    workers: Workers


def assemble(config: AgenticConfig, *, verbose: bool = False) -> RunParts:
    """Build a run's parts: model, cluster (every node sees the run folder and the model), checkpoints and
    resume state, tracker, renderer, then the workers."""
    from transformers import AutoTokenizer

    config = concrete_dtypes(config, _log)
    run_dir = Path(config.output_dir) / config.exp_name
    run_dir.mkdir(parents=True, exist_ok=True)
    model_path = config_model(config, tuple(settings.spawn_settings(config).roles))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    cluster = make_cluster(config.cluster.backend, config.cluster.address, config.cluster.num_cpus)
    # every node sees the run folder and the model, or one error names the node (before any worker)
    confirm_shared_storage(cluster, run_dir, model_path)
    checkpoints = CheckpointManager(run_dir / "checkpoints", config.keep_last_n)
    resume_from, resume_state = read_resume_state(config.resume_from_checkpoint, checkpoints)
    resumed = resume_state or {}
    tracker = Tracker(
        run_dir,
        config.track_with,
        config=config.model_dump(mode="json"),
        verbose=verbose,
        tracker_kwargs=config.tracker_kwargs,
        resume_step=resumed.get("step"),
        wandb_run_id=(resumed.get("tracker") or {}).get("wandb_run_id"),
    )
    renderer = renderer_of(
        run_dir, config.render_save_dir, env_sources(config.custom_envs), config.render_episodes_per_tag
    )
    workers = spawn_workers(config, cluster, Path(model_path), tokenizer)
    return RunParts(
        run_dir,
        model_path,
        tokenizer,
        cluster,
        checkpoints,
        resume_from,
        resume_state,
        tracker,
        renderer,
        workers,
    )


def spawn_workers(config: AgenticConfig, cluster: Cluster, model_path: Path, tokenizer: Any) -> Workers:
    """Each role's workers from its plan, the rollouts that ask the policy server, and the step's components."""
    from roll_strategies import ActorTrainWorker, CriticWorker, ReferenceWorker

    cfg = config
    spawn = settings.spawn_settings(cfg)
    plans, cpus = plan_roles(spawn, cluster.cpu_capacity())
    spawner = RoleSpawner(plans, cluster, model_path)
    # The exact KL needs both models' logits in one process: the train worker holds a frozen reference copy.
    reference_copy = (
        {"reference_model_path": str(model_path), "reference_dtype": cfg.reference.model_args.dtype}
        if cfg.reference_in_trainer
        else {}
    )
    # the trained roles: N data-parallel ranks each (`RankGroup` fans the calls out)
    actor_train = spawner.spawn_ranks(ActorTrainWorker, "actor_train", seed=cfg.seed, **reference_copy)
    critic = None
    if "critic" in spawn.names:
        critic = spawner.spawn_ranks(CriticWorker, "critic", seed=cfg.seed + 7)
    policy_server = spawner.spawn(
        PolicyServer,
        "actor_infer",
        seed=cfg.seed,
        stop_strings=cfg.actor_infer.generating_args.stop_strings,
        max_batch_size=cfg.actor_infer.infer_batch_size,
    )
    sleeper = InferSleeper(
        infer_sleep(spawn.roles, spawn.names),
        lambda method, *args: cluster.call(policy_server, method, *args),
        _log,
    )
    reference = None
    if cfg.reference_in_trainer:
        reference = actor_train
    elif "reference" in spawn.names:
        reference = RankGroup(cluster, [spawner.spawn(ReferenceWorker, "reference")])
    groups = {"actor_train": actor_train, "critic": critic, "reference": reference}
    offload = TrainerOffloader(
        {n: g for n in offloaded_roles(spawn.roles, spawn.names) if (g := groups.get(n)) is not None}, _log
    )
    kl = KLControl(
        cfg.init_kl_coef, cfg.kl_loss_coef if cfg.use_kl_loss else 0.0, cfg.target_kl, cfg.kl_horizon
    )
    policy = RemotePolicy(cluster.remote_method(policy_server, "generate_many"))
    rollout_settings = settings.rollout_settings(cfg)
    rollout = partial(build_scheduler, rollout_settings, cluster=cluster, tokenizer=tokenizer, policy=policy)
    train_rollout = rollout(cfg.train_env_manager, validation=False, seed=cfg.seed, name="train")
    val_rollout = rollout(cfg.val_env_manager, validation=True, seed=cfg.seed + 1, name="val")
    demo_rollout = None
    if cfg.demonstration_steps > 0:  # its env workers start at its first batch and stop after the last
        demo_rollout = rollout(
            cfg.train_env_manager, validation=False, seed=cfg.seed + 2, name="demo", demonstration=True
        )
    make_experience = ExperienceMaker(
        settings.experience_settings(cfg), actor_train, reference, critic, kl, tokenizer.pad_token_id
    )
    sync = pick_transport(spawn.backend, plans["actor_train"], plans["actor_infer"])
    _log(f"[roll] weight sync transport: {sync}")
    update_weights = WeightUpdater(
        cluster,
        actor_train,
        policy_server,
        dtype=cfg.actor_infer.model_args.dtype,
        frequency=cfg.model_update_frequency,
        transport=sync.transport,
    )
    return Workers(
        plans,
        cpus,
        actor_train,
        critic,
        policy_server,
        reference,
        sleeper,
        kl,
        rollout_settings,
        train_rollout,
        val_rollout,
        make_experience,
        update_weights,
        offload,
        demo_rollout,
    )


async def build_updaters(
    config: AgenticConfig, workers: Workers
) -> tuple[ActorUpdater, CriticUpdater | None]:
    """The actor's and the critic's update, with their micro-batch layouts; packing falls back to dynamic
    batching on a model that cannot pack (the workers probe it); `share_prefix` keeps each group together."""
    cfg = config
    roles = [("actor_train", workers.actor_train, cfg.actor_train)]
    if workers.critic is not None:
        roles.append(("critic", workers.critic, cfg.critic))
    layouts = {}
    for name, group, role in roles:
        ok = True
        if role.use_sequence_packing:
            ok = bool(await group.call_main("packing_supported"))
            if not ok:
                _log(
                    f"[roll] WARNING: {name}: the model gives different outputs when sequences are packed"
                    " (its attention does not honour restarting position ids), so use_sequence_packing falls"
                    " back to dynamic batching (actor/sequence_packing = 0 in the metrics)"
                )
        # the strategy's cost of an attention pair, so the counts of the tokens computed follow its tree choice
        weight = float(await group.call_main("attention_pair_weight")) if cfg.share_prefix else 0.0
        layouts[name] = TrainLayout.of(role, packing_ok=ok, share_prefix=cfg.share_prefix, pair_weight=weight)
    schedule, loss = settings.update_schedule(cfg, "actor_train"), settings.actor_loss_template(cfg)
    update_actor = ActorUpdater(
        workers.actor_train,
        workers.kl,
        layouts["actor_train"],
        schedule,
        loss,
        cfg.use_kl_loss,
        cfg.demonstration_learning_rate / cfg.actor_train.training_args.learning_rate,
    )
    update_critic = None
    if workers.critic is not None:
        critic_schedule, critic_loss = settings.update_schedule(cfg, "critic"), settings.critic_loss(cfg)
        update_critic = CriticUpdater(workers.critic, layouts["critic"], critic_schedule, critic_loss)
    return update_actor, update_critic


def inference_server(config: AgenticConfig, model: Path | str) -> Any:
    """A `PolicyServer` in this process, as the config's actor_infer role: backend, dtype, device, stops."""
    infer = concrete_dtypes(config, _log).actor_infer
    return PolicyServer(
        model,
        dtype=infer.model_args.dtype,
        device=plan_placement({"actor_infer": infer}, "local")["actor_infer"].device,
        seed=config.seed,
        num_threads=infer.num_threads,
        stop_strings=infer.generating_args.stop_strings,
        **strategy_kwargs(infer, config.share_prefix),
    )


def _log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message)
