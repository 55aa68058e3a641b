"""A run's parts, built from its settings once (`assembly.settings.RunSettings`): the model folder and tokenizer,
the cluster, the checkpoints and resume state, the tracker, each role's workers from its plan
(`runtime.placement.plan_roles`), the rollouts, and the step's components (experience, updates, weight sync,
the demonstration phase, the reference taking the RL start's weights). `AgenticPipeline` runs the loop over them; `roll eval` and `roll serve` build their
inference server here too. Nothing here reads the config itself."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from roll_rollout import RemotePolicy, RolloutScheduler

from roll_pipeline.assembly.settings import RunSettings, run_settings
from roll_pipeline.config.colocation import infer_sleep, offloaded_roles
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.render import env_sources, renderer_of
from roll_pipeline.observe.tracking import Tracker
from roll_pipeline.runtime.cluster import make_cluster
from roll_pipeline.runtime.infer_sleep import InferSleeper
from roll_pipeline.runtime.placement import plan_placement, plan_roles, roles_model, strategy_kwargs
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.runtime.rollout import build_scheduler
from roll_pipeline.runtime.storage import confirm_shared_storage
from roll_pipeline.runtime.trainer_offload import TrainerOffloader
from roll_pipeline.runtime.workers import RoleSpawner
from roll_pipeline.state.checkpoint import CheckpointManager
from roll_pipeline.state.run_state import read_resume_state
from roll_pipeline.trainer.actor_update import ActorUpdater
from roll_pipeline.trainer.critic_update import CriticUpdater
from roll_pipeline.trainer.demonstration import Demonstration
from roll_pipeline.trainer.experience import ExperienceMaker
from roll_pipeline.trainer.kl_control import KLControl
from roll_pipeline.trainer.micro_batches import TrainLayout
from roll_pipeline.trainer.start_reference import StartReference
from roll_pipeline.trainer.weight_update import WeightUpdater, pick_transport

__all__ = ["RunParts", "assemble", "build_updaters", "inference_server"]


def assemble(config: AgenticConfig, *, verbose: bool = False) -> RunParts:
    """The parts of a config's run (`RunParts` of its `run_settings`)."""
    return RunParts(run_settings(config), verbose=verbose)


class RunParts:
    """Everything a run is made of before its first step: each part is an attribute set once, here (a new step
    component is one more line in `_components`)."""

    def __init__(self, settings: RunSettings, *, verbose: bool = False) -> None:
        """Model, cluster (every node sees the run folder and the model), checkpoints and resume state,
        tracker, renderer, then the workers."""
        from transformers import AutoTokenizer

        s, out = settings, settings.outputs
        self.settings = s
        self.run_dir = out.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model_path = roles_model(s.pretrain, s.seed, s.spawn.roles)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.cluster = make_cluster(s.cluster.backend, s.cluster.address, s.cluster.num_cpus)
        # every node sees the run folder and the model, or one error names the node (before any worker)
        confirm_shared_storage(self.cluster, self.run_dir, self.model_path)
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints", out.keep_last_n)
        self.resume_from, self.resume_state = read_resume_state(out.resume_from_checkpoint, self.checkpoints)
        resumed = self.resume_state or {}
        self.tracker = Tracker(
            self.run_dir,
            out.track_with,
            config=out.config_json,
            verbose=verbose,
            tracker_kwargs=out.tracker_kwargs,
            resume_step=resumed.get("step"),
            wandb_run_id=(resumed.get("tracker") or {}).get("wandb_run_id"),
        )
        sources = env_sources(s.rollout.envs)
        self.renderer = renderer_of(self.run_dir, out.render_save_dir, sources, out.render_episodes_per_tag)
        self._spawn(s, Path(self.model_path))
        self._components(s)

    def _spawn(self, s: RunSettings, model_path: Path) -> None:
        """Each role's workers from its plan."""
        from roll_strategies import ActorTrainWorker, CriticWorker, ReferenceWorker

        spawn, cluster = s.spawn, self.cluster
        plans, self.cpus = plan_roles(spawn, cluster.cpu_capacity())
        self.plans = plans
        spawner = RoleSpawner(plans, cluster, model_path)
        # The exact KL needs both models' logits in one process: the train worker holds a frozen reference copy.
        reference_copy = (
            {
                "reference_model_path": str(model_path),
                "reference_dtype": spawn.roles["reference"].model_args.dtype,
            }
            if spawn.reference_in_trainer
            else {}
        )
        # the trained roles: N data-parallel ranks each (`RankGroup` fans the calls out)
        self.actor_train = spawner.spawn_ranks(ActorTrainWorker, "actor_train", seed=s.seed, **reference_copy)
        self.critic: RankGroup | None = None
        if "critic" in spawn.names:
            self.critic = spawner.spawn_ranks(CriticWorker, "critic", seed=s.seed + 7)
        infer = spawn.roles["actor_infer"]
        self.policy_server = spawner.spawn(
            PolicyServer,
            "actor_infer",
            seed=s.seed,
            stop_strings=infer.generating_args.stop_strings,
            max_batch_size=infer.infer_batch_size,
        )
        self.infer_sleep = InferSleeper(
            infer_sleep(spawn.roles, spawn.names),
            lambda method, *args: cluster.call(self.policy_server, method, *args),
            _log,
        )
        # the worker holding the reference model (the train worker for an exact KL)
        self.reference: RankGroup | None = None
        if spawn.reference_in_trainer:
            self.reference = self.actor_train
        elif "reference" in spawn.names:
            self.reference = RankGroup(cluster, [spawner.spawn(ReferenceWorker, "reference")])
        groups = {"actor_train": self.actor_train, "critic": self.critic, "reference": self.reference}
        self.trainer_offload = TrainerOffloader(
            {n: g for n in offloaded_roles(spawn.roles, spawn.names) if (g := groups.get(n)) is not None},
            _log,
        )

    def _components(self, s: RunSettings) -> None:
        """The rollouts that ask the policy server, and the step's components."""
        cluster = self.cluster
        self.kl = KLControl(*s.kl_coefs)
        policy = RemotePolicy(cluster.remote_method(self.policy_server, "generate_many"))
        rollout = partial(
            build_scheduler, s.rollout, cluster=cluster, tokenizer=self.tokenizer, policy=policy
        )
        self.train_rollout = rollout(s.train_envs, validation=False, seed=s.seed, name="train")
        self.val_rollout = rollout(s.val_envs, validation=True, seed=s.seed + 1, name="val")
        pad_id = self.tokenizer.pad_token_id
        self.make_experience = ExperienceMaker(
            s.experience, self.actor_train, self.reference, self.critic, self.kl, pad_id
        )
        self.demonstration: Demonstration | None = None
        if s.demonstration_steps > 0:  # its env workers start at its first batch and stop after the last
            cloning = replace(s.experience, recompute_old_log_probs=False, measure_signal=False)
            self.demonstration = Demonstration(
                s.demonstration_steps,
                rollout(
                    s.demonstration_envs, validation=False, seed=s.seed + 2, name="demo", demonstration=True
                ),
                ExperienceMaker(cloning, self.actor_train, None, self.critic, self.kl, pad_id),
                s.demonstration_loss,
                s.demonstration_schedule,
            )
        # kl_reference: rl_start (the config checks make sure a KL term, hence a reference, is there)
        self.start_reference: StartReference | None = None
        if s.kl_reference == "rl_start" and self.reference is not None:
            in_trainer = s.spawn.reference_in_trainer
            self.start_reference = StartReference(self.actor_train, self.reference, in_trainer=in_trainer)
        sync = pick_transport(s.spawn.backend, self.plans["actor_train"], self.plans["actor_infer"])
        _log(f"[roll] weight sync transport: {sync}")
        self.update_weights = WeightUpdater(
            cluster,
            self.actor_train,
            self.policy_server,
            dtype=s.spawn.roles["actor_infer"].model_args.dtype,
            frequency=s.model_update_frequency,
            transport=sync.transport,
        )

    @property
    def rollouts(self) -> dict[str, RolloutScheduler]:
        """The run's schedulers by the name its checkpoints keep their seed streams under."""
        demo = {"demo": self.demonstration.rollout} if self.demonstration is not None else {}
        return {"train": self.train_rollout, "val": self.val_rollout, **demo}


async def build_updaters(parts: RunParts) -> tuple[ActorUpdater, CriticUpdater | None]:
    """The actor's and the critic's update, with their micro-batch layouts; packing falls back to dynamic
    batching on a model that cannot pack (the workers probe it); `share_prefix` keeps each group together."""
    s, share_prefix = parts.settings, parts.settings.spawn.share_prefix
    roles = [("actor_train", parts.actor_train)]
    if parts.critic is not None:
        roles.append(("critic", parts.critic))
    layouts = {}
    for name, group in roles:
        role, ok = s.spawn.roles[name], True
        if role.use_sequence_packing:
            ok = bool(await group.call_main("packing_supported"))
            if not ok:
                _log(
                    f"[roll] WARNING: {name}: the model gives different outputs when sequences are packed"
                    " (its attention does not honour restarting position ids), so use_sequence_packing falls"
                    " back to dynamic batching (actor/sequence_packing = 0 in the metrics)"
                )
        # the strategy's cost of an attention pair, so the counts of the tokens computed follow its tree choice
        weight = float(await group.call_main("attention_pair_weight")) if share_prefix else 0.0
        layouts[name] = TrainLayout.of(role, packing_ok=ok, share_prefix=share_prefix, pair_weight=weight)
    update_actor = ActorUpdater(
        parts.actor_train, parts.kl, layouts["actor_train"], s.actor_schedule, s.actor_loss, s.use_kl_loss
    )
    update_critic = None
    if parts.critic is not None:
        update_critic = CriticUpdater(parts.critic, layouts["critic"], s.critic_schedule, s.critic_loss)
    return update_actor, update_critic


def inference_server(settings: RunSettings, model: Path | str) -> Any:
    """A `PolicyServer` in this process, as the run's actor_infer role: backend, dtype, device, stops."""
    infer = settings.spawn.roles["actor_infer"]
    return PolicyServer(
        model,
        dtype=infer.model_args.dtype,
        device=plan_placement({"actor_infer": infer}, "local")["actor_infer"].device,
        seed=settings.seed,
        num_threads=infer.num_threads,
        stop_strings=infer.generating_args.stop_strings,
        **strategy_kwargs(infer, settings.spawn.share_prefix),
    )


def _log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message)
