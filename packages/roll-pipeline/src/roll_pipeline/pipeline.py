"""`AgenticPipeline(config).run()`: the agentic RL loop.

One step: rollout (whole env groups) -> old / reference log-probs -> advantages -> actor update ->
weights synced to the inference worker -> metrics; validation (greedy, fixed held-out seeds) every
`eval_steps` and at the end; a checkpoint every `save_steps`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from roll_algos import AdvantageConfig, compute_advantages
from roll_rollout import (
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    RemotePolicy,
    RolloutScheduler,
    SamplingSettings,
    Trajectory,
)
from roll_rollout.scheduler import validation_seeds
from roll_strategies import lr_decay_factor

from roll_pipeline.batch import RowBatch, build_rows, complete_groups
from roll_pipeline.checkpoint import CheckpointManager
from roll_pipeline.cluster import Cluster, make_cluster
from roll_pipeline.config import AgenticConfig, EnvManagerConfig, WorkerConfig
from roll_pipeline.loss import ActorLoss
from roll_pipeline.metrics import rollout_metrics, val_metrics
from roll_pipeline.models import resolve_pretrain
from roll_pipeline.tracking import Tracker
from roll_pipeline.workers import PolicyServer


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

    def __init__(self, config: AgenticConfig, *, progress: bool = True) -> None:
        from transformers import AutoTokenizer

        self.config = config
        self.progress = progress
        self.run_dir = Path(config.output_dir) / config.exp_name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model_path = resolve_pretrain(config.pretrain, seed=config.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.cluster: Cluster = make_cluster(
            config.cluster.backend, config.cluster.address, config.cluster.num_cpus
        )
        self.tracker = Tracker(self.run_dir, config.track_with, config=config.model_dump(mode="json"))
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints")
        self.step = 0
        self._spawn_workers()

    # ----------------------------------------------------------------- workers
    def _spawn_workers(self) -> None:
        from roll_strategies import ActorTrainWorker, ReferenceWorker

        cfg = self.config
        targs = cfg.actor_train.training_args
        self.actor_train = self._spawn_role(
            ActorTrainWorker,
            cfg.actor_train,
            "actor_train",
            learning_rate=targs.learning_rate,
            weight_decay=targs.weight_decay,
            betas=(targs.adam_beta1, targs.adam_beta2),
            eps=targs.adam_epsilon,
            max_grad_norm=targs.max_grad_norm,
            warmup_steps=targs.warmup_steps,
            seed=cfg.seed,
        )
        self.policy_server = self._spawn_role(
            PolicyServer,
            cfg.actor_infer,
            "actor_infer",
            seed=cfg.seed,
            stop_strings=cfg.actor_infer.generating_args.stop_strings,
        )
        self.reference = None
        if (cfg.use_kl_loss and cfg.kl_loss_coef > 0) or cfg.init_kl_coef > 0:
            self.reference = self._spawn_role(ReferenceWorker, cfg.reference, "reference")
        policy = RemotePolicy(self.cluster.remote_method(self.policy_server, "generate_many"))
        gen = cfg.actor_infer.generating_args
        self.train_rollout = self._scheduler(
            cfg.train_env_manager, policy, greedy=False, seed=cfg.seed, name="train"
        )
        self.val_rollout = self._scheduler(
            cfg.val_env_manager, policy, greedy=True, seed=cfg.seed + 1, name="val"
        )
        self._sampling_note = f"T={gen.temperature} top_p={gen.top_p}"

    def _spawn_role(self, cls: type, role: WorkerConfig, name: str, **kwargs: Any) -> Any:
        """A worker of `cls` on the role's devices, loading the run's model with the role's dtype and threads."""
        device, gpus = self._placement(role.device_mapping)
        return self.cluster.spawn(
            cls,
            str(self.model_path),
            name=name,
            num_cpus=0,
            num_gpus=gpus,
            device=device,
            dtype=role.model_args.dtype,
            num_threads=_cpu_threads(role.num_threads, device),
            **kwargs,
        )

    def _placement(self, device_mapping: list[int]) -> tuple[str, float]:
        """(torch device, Ray GPU share) of a role. Roles mapped to GPUs share them (colocated)."""
        if not device_mapping:
            return "cpu", 0.0
        if self.config.cluster.backend == "local":
            return f"cuda:{device_mapping[0]}", 0.0
        return "cuda", 0.3  # Ray sets CUDA_VISIBLE_DEVICES; three roles may share one GPU

    def _scheduler(
        self, manager: EnvManagerConfig, policy: RemotePolicy, *, greedy: bool, seed: int, name: str
    ) -> RolloutScheduler:
        cfg = self.config
        assert manager.num_groups_partition is not None
        layout = EnvLayout(
            manager.num_env_groups,
            manager.group_size,
            tuple(manager.tags),
            tuple(manager.num_groups_partition),
            manager.max_env_num_per_worker,
        )
        gen = cfg.actor_infer.generating_args
        sampling = {
            tag: SamplingSettings(
                max_new_tokens=cfg.custom_envs[tag].max_tokens_per_step,
                temperature=1.0 if greedy else gen.temperature,
                top_p=gen.top_p,
                top_k=gen.top_k,
                greedy=greedy,
            )
            for tag in manager.tags
        }
        workers = []
        for w in range(layout.num_workers):
            slots = []
            for env_id in layout.env_ids_of_worker(w):
                tag = layout.tag_of_group(env_id // layout.group_size)
                env = cfg.custom_envs[tag]
                slots.append(
                    EnvSlotSpec(
                        env_id,
                        tag,
                        env.env_type,
                        dict(env.env_config),
                        env.max_actions_per_traj,
                        env.max_history_turns,
                        cfg.sequence_length,
                        env.env_instruction,
                    )
                )
            handle = self.cluster.spawn(
                EnvWorker, slots, self.tokenizer, policy, name=f"{name}_env_{w}", num_cpus=0
            )
            workers.append(self.cluster.remote_method(handle, "run_episodes"))
        return RolloutScheduler(layout, workers, sampling, seed=seed)

    # ----------------------------------------------------------------- loop
    def run(self) -> RunSummary:
        """Train for `max_steps` steps; return what was reached."""
        return asyncio.run(self._run())

    async def _run(self) -> RunSummary:
        cfg = self.config
        started = time.perf_counter()
        summary = RunSummary(self.run_dir, 0, 0.0)
        if cfg.resume_from_checkpoint:
            await self._resume(Path(cfg.resume_from_checkpoint))
        await self._sync_weights()
        bar = _progress_bar(cfg.max_steps, self.step, enabled=self.progress)
        try:
            summary.val_history.append((self.step, await self._validate()))
            bar.set_postfix_str(f"val success {summary.val_success(-1):.2f}")
            while self.step < cfg.max_steps:
                metrics = await self._train_step()
                self.step += 1
                if self.step % cfg.eval_steps == 0 or self.step == cfg.max_steps:
                    val = await self._validate()
                    summary.val_history.append((self.step, val))
                    metrics.update(val)
                if self.step % cfg.save_steps == 0 or self.step == cfg.max_steps:
                    summary.last_checkpoint = await self._save_checkpoint()
                if self.step % cfg.logging_steps == 0 or self.step == cfg.max_steps:
                    self.tracker.log(metrics, self.step)
                bar.update(1)
                bar.set_postfix_str(_postfix(metrics, summary))
        finally:
            bar.close()
            self.tracker.close()
        summary.steps = self.step
        summary.wall_time_s = time.perf_counter() - started
        return summary

    async def _train_step(self) -> dict[str, float]:
        cfg, timings = self.config, {}
        t0 = time.perf_counter()
        trajs = await self.train_rollout.get_batch(cfg.train_rollout_batch_size)
        timings["time/step_rollout"] = time.perf_counter() - t0
        kept, failed = complete_groups(trajs)
        metrics = rollout_metrics(trajs, failed)
        metrics["rollout/infer_batch_size/mean"] = _mean(
            await self.cluster.call(self.policy_server, "batch_sizes")
        )
        if kept and any(t.turns for t in kept):
            metrics.update(await self._update_actor(kept, timings))
        t1 = time.perf_counter()
        await self._sync_weights()
        timings["time/step_model_update"] = time.perf_counter() - t1
        timings["time/step_total"] = time.perf_counter() - t0
        return {**metrics, **timings}

    async def _update_actor(self, trajs: Sequence[Trajectory], timings: dict[str, float]) -> dict[str, float]:
        cfg = self.config
        rows = build_rows(trajs, pad_id=self.tokenizer.pad_token_id)
        tensors = {
            "input_ids": rows.input_ids,
            "attention_mask": rows.attention_mask,
            "response_mask": rows.response_mask,
        }
        t = time.perf_counter()
        if cfg.recompute_old_log_probs:
            old_lp = await self.cluster.call(
                self.actor_train, "compute_log_probs", tensors, cfg.actor_train.infer_batch_size
            )
        else:  # the sampler's own log-probs: weights are synced every step, so they are on-policy
            old_lp = rows.infer_log_probs
        timings["time/step_old_log_probs"] = time.perf_counter() - t
        ref_lp = None
        if self.reference is not None:
            t = time.perf_counter()
            ref_lp = await self.cluster.call(
                self.reference, "compute_log_probs", tensors, cfg.reference.infer_batch_size
            )
            timings["time/step_ref_log_probs"] = time.perf_counter() - t
        t = time.perf_counter()
        adv = compute_advantages(
            cfg.adv_estimator,
            rows.advantage_inputs(old_log_probs=old_lp, ref_log_probs=ref_lp),
            AdvantageConfig(
                gamma=cfg.gamma,
                lambd=cfg.lambd,
                norm_mode=cfg.norm_mean_type,
                kl_coef=cfg.init_kl_coef,
                whiten=cfg.whiten_advantages,
                advantage_clip=cfg.advantage_clip,
                reward_clip=cfg.reward_clip,
            ),
        )
        timings["time/step_adv"] = time.perf_counter() - t
        t = time.perf_counter()
        train_metrics = await self._optimise(rows, old_lp, ref_lp, adv.advantages)
        timings["time/step_train"] = time.perf_counter() - t
        mask = rows.response_mask
        train_metrics["critic/advantages/mean"] = float(adv.advantages[mask].mean())
        train_metrics["critic/advantages/max"] = float(adv.advantages[mask].max())
        train_metrics["critic/advantages/min"] = float(adv.advantages[mask].min())
        if cfg.recompute_old_log_probs:
            train_metrics["actor/train_infer_logprob_diff"] = float(
                (old_lp - rows.infer_log_probs)[mask].abs().mean()
            )
        return train_metrics

    async def _optimise(
        self, rows: RowBatch, old_lp: torch.Tensor, ref_lp: torch.Tensor | None, advantages: torch.Tensor
    ) -> dict[str, float]:
        cfg = self.config
        targs = cfg.actor_train.training_args
        loss_fn = ActorLoss(
            clip_low=cfg.pg_clip_low or cfg.pg_clip,
            clip_high=cfg.pg_clip_high or cfg.pg_clip,
            dual_clip=3.0 if cfg.dual_clip_loss else None,
            agg_mode=cfg.loss_agg_mode,
            kl_loss_coef=cfg.kl_loss_coef if cfg.use_kl_loss else 0.0,
            kl_penalty=cfg.kl_penalty,
            entropy_loss_coef=cfg.entropy_loss_coef,
            skip_confident_tokens=cfg.skip_confident_tokens,
        )
        fields = {
            "input_ids": rows.input_ids,
            "attention_mask": rows.attention_mask,
            "response_mask": rows.response_mask,
            "old_log_probs": old_lp,
            "advantages": advantages,
        }
        if ref_lp is not None:
            fields["ref_log_probs"] = ref_lp
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step)
        micro, per_step = (
            targs.per_device_train_batch_size,
            targs.per_device_train_batch_size * targs.gradient_accumulation_steps,
        )
        lr_scale = lr_decay_factor(
            targs.lr_scheduler_type, self.step / max(cfg.max_steps, 1), targs.min_lr_ratio
        )
        collected: list[dict[str, float]] = []
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(rows.num_rows, generator=generator)
            for idx in mini_batches(order, per_step):
                mbs = []
                for m in range(0, len(idx), micro):
                    sub = idx[m : m + micro]
                    mb = {k: v[sub] for k, v in fields.items()}
                    mb["loss_scale"] = torch.tensor(len(sub) / len(idx))
                    mbs.append(_trim_padding(mb))
                collected.append(
                    await self.cluster.call(
                        self.actor_train, "train_step", mbs, loss_fn, with_entropy=True, lr_scale=lr_scale
                    )
                )
        merged = {k: _mean([m[k] for m in collected if k in m]) for k in collected[-1]}
        return {(k if "/" in k else f"actor/{k}"): v for k, v in merged.items()}

    async def _sync_weights(self) -> None:
        weights = self.cluster.call(
            self.actor_train, "export_weights"
        )  # not awaited: passed worker to worker
        await self.cluster.call(self.policy_server, "update_weights", weights, self.step)

    async def _validate(self) -> dict[str, float]:
        t = time.perf_counter()
        count = self.config.val_rollout_batch_size
        trajs = await self.val_rollout.get_batch(
            count, seeds=validation_seeds(count // self.val_rollout.layout.group_size)
        )
        metrics = val_metrics(trajs)
        metrics["time/step_val"] = time.perf_counter() - t
        await self.cluster.call(self.policy_server, "batch_sizes")
        return metrics

    # ----------------------------------------------------------------- checkpoints
    async def _save_checkpoint(self) -> Path:
        state = {"step": self.step, "train_rng": self.train_rollout.rng_state()}
        return await self.checkpoints.save(
            self.step, state, lambda path: self.cluster.call(self.actor_train, "save_checkpoint", str(path))
        )

    async def _resume(self, path: Path) -> None:
        state = self.checkpoints.load_state(path)
        await self.cluster.call(self.actor_train, "load_checkpoint", str(self.checkpoints.model_dir(path)))
        self.step = int(state["step"])
        self.train_rollout.set_rng_state(state["train_rng"])

    def close(self) -> None:
        """Stop the workers."""
        self.cluster.shutdown()


def mini_batches(order: torch.Tensor, max_rows: int) -> list[torch.Tensor]:
    """Split row indices into the fewest mini-batches of at most `max_rows`, as equal as possible.

    Why equal: every mini-batch gets a full optimiser step, and Adam's step size does not shrink with
    the batch, so a remainder of a few rows would be one noisy full-size step per rollout.
    """
    count = max(1, -(-len(order) // max_rows))
    return [chunk for chunk in torch.tensor_split(order, count) if len(chunk)]


def _cpu_threads(configured: int | None, device: str) -> int | None:
    """Threads of a role: as configured, else all cores on the CPU (a Ray actor would get 1)."""
    if configured is not None or device != "cpu":
        return configured
    return os.cpu_count() or 1


def _trim_padding(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cut the columns that are padding in every row of the micro-batch."""
    width = int(mb["attention_mask"].sum(dim=1).max())
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in mb.items()}


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=initial, desc="train", unit="step", disable=not enabled, dynamic_ncols=True
    )


def _postfix(metrics: dict[str, float], summary: RunSummary) -> str:
    succ = [v for k, v in metrics.items() if k.startswith("env/") and k.endswith("/success")]
    parts = [f"success {_mean(succ):.2f}"] if succ else []
    if summary.val_history:
        parts.append(f"val {summary.val_success(-1):.2f}")
    if "time/step_total" in metrics:
        parts.append(f"{metrics['time/step_total']:.1f}s/step")
    return " ".join(parts)
