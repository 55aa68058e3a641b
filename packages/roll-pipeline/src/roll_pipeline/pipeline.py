"""`AgenticPipeline(config).run()`: the agentic RL loop.

One step: rollout (whole env groups, `rollout_setup`) -> experience (`experience`: samples, old /
reference log-probs, values, KL, advantages) -> critic update (`critic_update`, only for an estimator that
declares needs_critic, e.g. gae) -> actor update (`actor_update`: PPO mini-batches; skipped during
`critic_warmup`) -> KL controller update -> weights synced to the inference worker -> metrics (a vllm
inference engine on the trainer's GPUs sleeps from the end of the rollout to the weight sync:
`runtime.infer_sleep`); validation
(greedy, fixed held-out seeds) every `eval_steps` and at the end (with `render_save_dir`, a few of its
episodes drawn as GIFs: `render`); a checkpoint every `save_steps`. With `async_generation_ratio` r > 0
the env loops keep generating while the actor trains, so the rollout of step k + 1 overlaps the update of
step k (docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from roll_rollout import RemotePolicy, validation_seeds

from roll_pipeline.config.colocation import infer_sleep
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.observe.metrics import mean, rollout_metrics, val_metrics
from roll_pipeline.observe.render import env_sources, renderer_of
from roll_pipeline.observe.tracking import Tracker
from roll_pipeline.runtime.cluster import Cluster, make_cluster
from roll_pipeline.runtime.infer_sleep import InferSleeper
from roll_pipeline.runtime.placement import model_folder, optimiser_kwargs
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.runtime.rollout import build_scheduler, sampling_of
from roll_pipeline.runtime.storage import confirm_shared_storage
from roll_pipeline.runtime.workers import RoleSpawner
from roll_pipeline.state.checkpoint import CheckpointError, CheckpointManager
from roll_pipeline.state.run_state import (
    pipeline_state,
    read_resume_state,
    restore_pipeline_state,
    set_global_rng_state,
)
from roll_pipeline.trainer import settings
from roll_pipeline.trainer.actor_update import ActorUpdater
from roll_pipeline.trainer.critic_update import CriticUpdater
from roll_pipeline.trainer.experience import ExperienceMaker
from roll_pipeline.trainer.kl_control import KLControl
from roll_pipeline.trainer.micro_batches import TrainLayout
from roll_pipeline.trainer.weight_update import WeightUpdater

CRITIC_DIR = "critic"
"""Where a checkpoint keeps the critic (next to `model/`)."""


class PipelineError(RuntimeError):
    """The run cannot go on (e.g. too many steps in a row with nothing to train on)."""


@dataclass
class RunSummary:
    """What a run reached."""

    run_dir: Path
    steps: int
    wall_time_s: float
    val_history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    last_checkpoint: Path | None = None

    def val_success(self, index: int) -> float:
        """Mean validation success over tags at the `index`-th validation (-1: last)."""
        metrics = self.val_history[index][1]
        values = [v for k, v in metrics.items() if k.startswith("val/env/") and k.endswith("/success")]
        return sum(values) / max(len(values), 1)


class AgenticPipeline:
    """Builds the workers of a config and runs the training loop."""

    def __init__(self, config: AgenticConfig, *, progress: bool = True, verbose: bool = False) -> None:
        from transformers import AutoTokenizer

        self.config = config
        self.progress = progress
        self.run_dir = Path(config.output_dir) / config.exp_name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.spawn_settings = settings.spawn_settings(config)
        roles = self.spawn_settings.roles
        gguf = next((r.model_args.gguf_file for r in roles.values() if r.model_args.gguf_file), None)
        # a hub repo's snapshot holds only that GGUF file; roles that set one name the same (model_folder)
        self.model_path = model_folder(
            resolve_pretrain(config.pretrain, seed=config.seed, gguf_file=gguf), roles
        )
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.cluster: Cluster = make_cluster(
            config.cluster.backend, config.cluster.address, config.cluster.num_cpus
        )
        # every node sees the run folder and the model, or one error names the node (before any worker)
        confirm_shared_storage(self.cluster, self.run_dir, self.model_path)
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints", config.keep_last_n)
        self.resume_from, self._resume_state = read_resume_state(
            config.resume_from_checkpoint, self.checkpoints
        )
        resumed = self._resume_state or {}
        self.tracker = Tracker(
            self.run_dir,
            config.track_with,
            config=config.model_dump(mode="json"),
            verbose=verbose,
            tracker_kwargs=config.tracker_kwargs,
            resume_step=resumed.get("step"),
            wandb_run_id=(resumed.get("tracker") or {}).get("wandb_run_id"),
        )
        self.renderer = renderer_of(
            self.run_dir,
            config.render_save_dir,
            env_sources(config.custom_envs),
            config.render_episodes_per_tag,
        )
        self.step = 0
        self._skipped_in_a_row = 0
        self._spawn_workers()

    # ----------------------------------------------------------------- workers
    def _spawn_workers(self) -> None:
        from roll_strategies import ActorTrainWorker, CriticWorker, ReferenceWorker

        cfg = self.config
        spawner = RoleSpawner(self.spawn_settings, self.cluster, self.model_path)
        names, self.cpus = spawner.names, spawner.cpus
        # The exact KL needs both models' logits in one process: the train worker holds a frozen reference copy.
        reference_copy = (
            {"reference_model_path": str(self.model_path), "reference_dtype": cfg.reference.model_args.dtype}
            if cfg.reference_in_trainer
            else {}
        )
        # the trained roles: N data-parallel ranks each (`RankGroup` fans the calls out)
        self.actor_train = spawner.spawn_ranks(
            ActorTrainWorker,
            "actor_train",
            **optimiser_kwargs(cfg.actor_train),
            seed=cfg.seed,
            **reference_copy,
        )
        self.critic: RankGroup | None = None
        if "critic" in names:
            self.critic = spawner.spawn_ranks(
                CriticWorker,
                "critic",
                **optimiser_kwargs(cfg.critic),
                seed=cfg.seed + 7,
            )
        self.policy_server = spawner.spawn(
            PolicyServer,
            "actor_infer",
            seed=cfg.seed,
            stop_strings=cfg.actor_infer.generating_args.stop_strings,
            max_batch_size=cfg.actor_infer.infer_batch_size,
        )
        self.infer_sleep = InferSleeper(
            infer_sleep(self.spawn_settings.roles, names),
            lambda method, *args: self.cluster.call(self.policy_server, method, *args),
            _log,
        )
        self.reference: RankGroup | None = None  # the worker holding the reference model (`ExperienceMaker`)
        if cfg.reference_in_trainer:
            self.reference = self.actor_train
        elif "reference" in names:
            handle = spawner.spawn(ReferenceWorker, "reference")
            self.reference = RankGroup(self.cluster, [handle])
        self.kl = KLControl(
            cfg.init_kl_coef, cfg.kl_loss_coef if cfg.use_kl_loss else 0.0, cfg.target_kl, cfg.kl_horizon
        )
        policy = RemotePolicy(self.cluster.remote_method(self.policy_server, "generate_many"))
        self.rollout_settings = settings.rollout_settings(cfg)
        rollout = partial(
            build_scheduler,
            self.rollout_settings,
            cluster=self.cluster,
            tokenizer=self.tokenizer,
            policy=policy,
        )
        self.train_rollout = rollout(cfg.train_env_manager, validation=False, seed=cfg.seed, name="train")
        self.val_rollout = rollout(cfg.val_env_manager, validation=True, seed=cfg.seed + 1, name="val")
        self.make_experience = ExperienceMaker(
            settings.experience_settings(cfg),
            self.actor_train,
            self.reference,
            self.critic,
            self.kl,
            self.tokenizer.pad_token_id,
        )
        self.update_actor: ActorUpdater | None = None  # built in `_setup_train_layouts` (packing is probed)
        self.update_critic: CriticUpdater | None = None
        self.update_weights = WeightUpdater(
            self.cluster,
            self.actor_train,
            self.policy_server,
            dtype=cfg.actor_infer.model_args.dtype,
            frequency=cfg.model_update_frequency,
        )

    async def _setup_train_layouts(self) -> None:
        """Micro-batch layouts of the trained roles; packing falls back to dynamic batching on a model that
        cannot pack (the workers probe it)."""
        cfg = self.config
        roles = [("actor_train", self.actor_train, cfg.actor_train)]
        if self.critic is not None:
            roles.append(("critic", self.critic, cfg.critic))
        layouts = {}
        for name, group, role in roles:
            ok = True
            if role.use_sequence_packing:
                ok = bool(await group.call_main("packing_supported"))
                if not ok:
                    from tqdm.auto import tqdm

                    tqdm.write(
                        f"[roll] WARNING: {name}: the model gives different outputs when sequences are packed"
                        " (its attention does not honour restarting position ids), so use_sequence_packing falls"
                        " back to dynamic batching (actor/sequence_packing = 0 in the metrics)"
                    )
            layouts[name] = TrainLayout.of(role, packing_ok=ok)
        schedule, loss = settings.update_schedule(cfg, "actor_train"), settings.actor_loss_template(cfg)
        self.update_actor = ActorUpdater(
            self.actor_train, self.kl, layouts["actor_train"], schedule, loss, cfg.use_kl_loss
        )
        if self.critic is not None:
            critic_schedule, critic_loss = settings.update_schedule(cfg, "critic"), settings.critic_loss(cfg)
            self.update_critic = CriticUpdater(self.critic, layouts["critic"], critic_schedule, critic_loss)

    # ----------------------------------------------------------------- loop
    def run(self) -> RunSummary:
        """Train for `max_steps` steps; return what was reached."""
        return asyncio.run(self._run())

    async def _run(self) -> RunSummary:
        cfg = self.config
        started = time.perf_counter()
        summary = RunSummary(self.run_dir, 0, 0.0)
        if self._resume_state is not None:
            await self._resume(self._resume_state)
        bar = _progress_bar(cfg.max_steps, self.step, enabled=self.progress)
        try:
            await self._setup_train_layouts()
            await self._sync_weights(force=True)  # the inference worker may hold other weights (resume)
            summary.val_history.append((self.step, await self._validate()))
            if self.step == 0:  # the starting point of every curve, in every tracker
                self.tracker.log(summary.val_history[-1][1], 0)
            if self._resume_state is not None and "global_rng" in self._resume_state:
                # Now, not at load: the RNGs enter the next step exactly as they left the saved one.
                set_global_rng_state(self._resume_state["global_rng"])
            bar.set_postfix_str(f"val success {summary.val_success(-1):.2f}")
            while self.step < cfg.max_steps:
                metrics = await self._train_step()
                validated = self.step % cfg.eval_steps == 0 or self.step == cfg.max_steps
                if validated:
                    val = await self._validate()
                    summary.val_history.append((self.step, val))
                    metrics.update(val)
                metrics.update(await self._release_memory())
                # a validation step is logged whatever logging_steps is: its row is the learning curve
                if validated or self.step % cfg.logging_steps == 0 or self.step == cfg.max_steps:
                    self.tracker.log(metrics, self.step)
                # After the row: a resume from this checkpoint keeps the rows up to its step, so a process
                # killed between a save and its row's write would have lost the row for good.
                if self.step % cfg.save_steps == 0 or self.step == cfg.max_steps:
                    summary.last_checkpoint = await self._save_checkpoint()
                bar.update(1)
                bar.set_postfix_str(_postfix(metrics, summary))
        finally:
            bar.close()
            await self.infer_sleep.before_weight_sync()  # a step that failed in training leaves it asleep
            await self.train_rollout.stop()
            await self.val_rollout.stop()
            self.tracker.close()
        summary.steps = self.step
        summary.wall_time_s = time.perf_counter() - started
        return summary

    async def _train_step(self) -> dict[str, float]:
        """Rollout, actor update, weight sync; the step counter advances by one."""
        cfg, timings = self.config, {}
        t0 = time.perf_counter()
        step = self.step + 1  # this step's number in the metrics, which temperature_schedule counts in
        tags = cfg.train_env_manager.tags
        self.train_rollout.set_sampling(sampling_of(self.rollout_settings, tags, greedy=False, step=step))
        batch = await self.train_rollout.get_batch(cfg.train_rollout_batch_size)
        timings["time/step_rollout"] = time.perf_counter() - t0
        metrics = rollout_metrics(batch)
        metrics["rollout/temperature"] = cfg.actor_infer.generating_args.temperature_at(step)
        metrics["rollout/infer_batch_size/mean"] = mean(
            await self.cluster.call(self.policy_server, "batch_sizes")
        )
        timings.update(await self.infer_sleep.before_training())
        if any(t.turns for t in batch.trajectories):
            metrics.update(await self._update(batch.trajectories, timings))
            self._skipped_in_a_row = 0
        else:
            metrics["train/skipped_step"] = 1.0
            self._skip("every trajectory ended before its first turn (a prompt longer than sequence_length?)")
        self.step += 1
        t1 = time.perf_counter()
        timings.update(await self.infer_sleep.before_weight_sync())
        metrics.update(await self._sync_weights())
        timings["time/step_model_update"] = time.perf_counter() - t1
        timings["time/step_total"] = time.perf_counter() - t0
        return {**metrics, **timings}

    async def _update(self, trajectories: Sequence[Any], timings: dict[str, float]) -> dict[str, float]:
        """Experience -> critic update (gae) -> actor update (after critic_warmup) -> KL controller update."""
        assert self.update_actor is not None
        exp, metrics = await self.make_experience(trajectories, timings)
        if self.update_critic is not None:
            metrics.update(await self.update_critic(exp, self.step, timings))
        if self.step >= self.config.critic_warmup:
            metrics.update(await self.update_actor(exp, self.step, timings))
        else:
            metrics["actor/frozen_for_critic_warmup"] = 1.0
        counts = [
            metrics[f"{role}/nonfinite_steps"]
            for role in ("actor", "critic")
            if f"{role}/nonfinite_steps" in metrics
        ]
        if counts:  # optimizer steps skipped for a NaN/inf loss or gradient norm, so far (both roles)
            metrics["train/nonfinite_steps"] = sum(counts)
        if exp.kl_mean is not None:
            self.kl.update(exp.kl_mean, exp.num_trajectories)
        return metrics

    def _skip(self, reason: str) -> None:
        """Log a step with nothing to train on; stop the run after too many in a row."""
        from tqdm.auto import tqdm

        self._skipped_in_a_row += 1
        tqdm.write(f"[roll] step {self.step + 1} skipped: nothing to train on: {reason}")
        if self._skipped_in_a_row >= self.config.max_consecutive_skipped_steps:
            raise PipelineError(
                f"{self._skipped_in_a_row} steps in a row had nothing to train on ({reason}); stopping. "
                "Fix the env or the prompt budget, or raise max_consecutive_skipped_steps."
            )

    async def _sync_weights(self, force: bool = False) -> dict[str, float]:
        """Sync the trained weights to the inference worker as version `step` when due (`weight_update`); the
        version it serves is what the rollouts record and measure staleness against."""
        metrics = await self.update_weights(self.step, force=force)
        self.train_rollout.set_policy_version(self.update_weights.served_version)
        self.val_rollout.set_policy_version(self.update_weights.served_version)
        return metrics

    async def _validate(self) -> dict[str, float]:
        t = time.perf_counter()
        count = self.config.val_rollout_batch_size
        batch = await self.val_rollout.get_batch(
            count, seeds=validation_seeds(count // self.val_rollout.layout.group_size)
        )
        metrics = val_metrics(batch)
        metrics["time/step_val"] = time.perf_counter() - t
        if self.renderer is not None:  # in a thread: the event loop (async rollout, env workers) goes on
            render = self.renderer.render
            report = await asyncio.to_thread(render, batch.trajectories, self.step, self.tracker.log_images)
            metrics.update(report.metrics())
        await self.cluster.call(self.policy_server, "batch_sizes")  # validation's batches are not training's
        return metrics

    async def _release_memory(self) -> dict[str, float]:
        """Every worker process gives its freed heap memory back to the OS (`roll_strategies.allocator`: glibc
        keeps a step's freed tensors resident otherwise); memory/rss_gb: the resident sets after, summed over
        the distinct processes (in-process workers share the driver's)."""
        handles = [self.policy_server]
        for group in (self.actor_train, self.critic, self.reference):
            if group is not None:
                handles.extend(h for h in group.ranks if all(h is not seen for seen in handles))
        reports = await asyncio.gather(*(self.cluster.call(h, "release_memory") for h in handles))
        rss = {report.pid: report.rss_bytes for report in reports}
        return {"memory/rss_gb": sum(rss.values()) / 2**30}

    # ----------------------------------------------------------------- checkpoints
    async def _save_checkpoint(self) -> Path:
        state = pipeline_state(
            self.step, self._skipped_in_a_row, self.train_rollout, self.val_rollout, self.kl, self.tracker
        )

        async def save_models(path: Path) -> None:  # every rank: DeepSpeed writes each rank's shards
            await self.actor_train.call_all("save_checkpoint", str(path))
            if self.critic is not None:
                await self.critic.call_all("save_checkpoint", str(path.parent / CRITIC_DIR))

        return await self.checkpoints.save(self.step, state, save_models)

    async def _resume(self, state: dict[str, Any]) -> None:
        """Models, optimisers, step, schedulers and KL controller from the checkpoint (the global RNGs are
        set just before the first step)."""
        path = self.resume_from
        assert path is not None
        await self.actor_train.call_all("load_checkpoint", str(self.checkpoints.model_dir(path)))
        if self.critic is not None:
            critic_dir = Path(path) / CRITIC_DIR
            if not critic_dir.is_dir():
                raise CheckpointError(
                    f"{path} has no {CRITIC_DIR}/ folder: it was written by a run without a critic, and"
                    f" adv_estimator={self.config.adv_estimator} would resume with an untrained one; resume a"
                    " checkpoint of a run with a critic (e.g. gae) or start afresh"
                )
            await self.critic.call_all("load_checkpoint", str(critic_dir))
        self.step, self._skipped_in_a_row = restore_pipeline_state(
            state, self.train_rollout, self.val_rollout, self.kl
        )

    def close(self) -> None:
        """Stop the workers."""
        self.cluster.shutdown()


def _log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message)


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=initial, desc="train", unit="step", disable=not enabled, dynamic_ncols=True
    )


def _postfix(metrics: dict[str, float], summary: RunSummary) -> str:
    succ = [v for k, v in metrics.items() if k.startswith("env/") and k.endswith("/success")]
    parts = [f"success {mean(succ):.2f}"] if succ else []
    if summary.val_history:
        parts.append(f"val {summary.val_success(-1):.2f}")
    if "time/step_total" in metrics:
        parts.append(f"{metrics['time/step_total']:.1f}s/step")
    return " ".join(parts)
