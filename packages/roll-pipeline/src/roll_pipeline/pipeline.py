"""`AgenticPipeline(config).run()`: the agentic RL loop.

The first `demonstration_steps` steps are behaviour cloning: their rollout plays episodes the envs answer
(`BaseEnv.demonstration`, a synchronous scheduler of their own) and the actor trains on those answers with the
`sft` loss (no critic, KL or entropy term): one phase object, `trainer.demonstration.Demonstration`. One RL step: rollout (whole env groups, `rollout_setup`) -> experience (`experience`: samples, old /
reference log-probs, values, KL, advantages) -> critic update (`critic_update`, only for an estimator that
declares needs_critic, e.g. gae) -> actor update (`actor_update`: PPO mini-batches; skipped during
`critic_warmup`) -> KL controller update -> weights synced to the inference worker -> metrics (a vllm
inference engine on the trainer's GPUs sleeps from the end of the rollout to the weight sync:
`runtime.infer_sleep`; trained roles on its GPUs keep their state in CPU memory from the weight sync to the
next training phase: `runtime.trainer_offload`); validation
(greedy, fixed held-out seeds) every `eval_steps` and at the end (`val_subset_size`: the first N of them, and
all of them too at the end; with `render_save_dir`, a few of its episodes drawn as GIFs: `render`); a checkpoint every `save_steps`. With `async_generation_ratio` r > 0
the env loops keep generating while the actor trains, so the rollout of step k + 1 overlaps the update of
step k (docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roll_rollout import RolloutBatch, validation_seeds

from roll_pipeline.assembly.parts import assemble, build_updaters
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.flips import ValidationFlips
from roll_pipeline.observe.metrics import mean, rollout_metrics, val_metrics
from roll_pipeline.observe.summary import SUBSET_PREFIX, RunSummary
from roll_pipeline.runtime.rollout import sampling_of
from roll_pipeline.state.checkpoint import CheckpointError
from roll_pipeline.state.run_state import (
    pipeline_state,
    restore_pipeline_state,
    set_global_rng_state,
)
from roll_pipeline.trainer.actor_update import ActorUpdater
from roll_pipeline.trainer.critic_update import CriticUpdater
from roll_pipeline.trainer.demonstration import Demonstration
from roll_pipeline.trainer.drift import DRIFT_FILE, StartDrift

CRITIC_DIR = "critic"
"""Where a checkpoint keeps the critic (next to `model/`)."""


class PipelineError(RuntimeError):
    """The run cannot go on (e.g. too many steps in a row with nothing to train on)."""


class AgenticPipeline:
    """Runs the training loop over the parts of a config (`assembly.assemble` builds them, `self.parts`)."""

    def __init__(self, config: AgenticConfig, *, progress: bool = True, verbose: bool = False) -> None:
        self.progress = progress
        self.parts = assemble(config, verbose=verbose)
        self.loop = self.parts.settings.loop
        self.update_actor: ActorUpdater | None = None  # built at the start of `run` (packing is probed)
        self.update_critic: CriticUpdater | None = None
        self.val_flips = ValidationFlips()  # validation episodes won and lost since the last pass
        # the KL to the policy the RL phase started from (its first step's rows)
        self.drift = StartDrift(self.parts.actor_train, self.parts.settings.experience.actor_batch_size)
        self.step = 0
        self._skipped_in_a_row = 0

    # ----------------------------------------------------------------- loop
    def run(self) -> RunSummary:
        """Train for `max_steps` steps; return what was reached."""
        return asyncio.run(self._run())

    async def _run(self) -> RunSummary:
        loop, parts = self.loop, self.parts
        started = time.perf_counter()
        summary = RunSummary(parts.run_dir, 0, 0.0)
        if parts.resume_state is not None:
            await self._resume(parts.resume_state)
        bar = _progress_bar(loop.max_steps, self.step, enabled=self.progress)
        try:
            self.update_actor, self.update_critic = await build_updaters(parts)
            await self._sync_weights(force=True)  # the inference worker may hold other weights (resume)
            await parts.trainer_offload.offload()  # colocated trainers leave the GPU to the engine
            if loop.validate_at_start:
                summary.val_history.append((self.step, await self._validate()))
                if self.step == 0:  # the starting point of every curve, in every tracker
                    parts.tracker.log(summary.val_history[-1][1], 0)
            if parts.resume_state is not None and "global_rng" in parts.resume_state:
                # Now, not at load: the RNGs enter the next step exactly as they left the saved one.
                set_global_rng_state(parts.resume_state["global_rng"])
            if summary.val_history:
                bar.set_postfix_str(f"val success {summary.val_success(-1):.2f}")
            while self.step < loop.max_steps:
                metrics = await self._train_step()
                validated = self._validates()
                if validated:
                    val = await self._validate()
                    summary.val_history.append((self.step, val))
                    metrics.update(val)
                metrics.update(await self._release_memory())
                # a validation step is logged whatever logging_steps is: its row is the learning curve
                if validated or self.step % loop.logging_steps == 0 or self.step == loop.max_steps:
                    parts.tracker.log(metrics, self.step)
                # After the row: a resume from this checkpoint keeps the rows up to its step, so a process
                # killed between a save and its row's write would have lost the row for good.
                if self.step % loop.save_steps == 0 or self.step == loop.max_steps:
                    summary.last_checkpoint = await self._save_checkpoint()
                bar.update(1)
                bar.set_postfix_str(_postfix(metrics, summary))
        finally:
            bar.close()
            await parts.infer_sleep.before_weight_sync()  # a step that failed in training leaves it asleep
            for rollout in parts.rollouts.values():
                await rollout.stop()
            parts.tracker.close()
        summary.steps = self.step
        summary.wall_time_s = time.perf_counter() - started
        return summary

    async def _train_step(self) -> dict[str, float]:
        """Rollout, actor update, weight sync; the step counter advances by one."""
        parts, size, timings = self.parts, self.loop.train_rollout_batch_size, {}
        t0 = time.perf_counter()
        step = self.step + 1  # this step's number in the metrics, which temperature_schedule counts in
        rollout = parts.settings.rollout
        demo = parts.demonstration if parts.demonstration and parts.demonstration.covers(self.step) else None
        if demo is not None:
            batch = await demo.batch(self.step, size)
        else:
            tags = parts.train_rollout.layout.tags
            parts.train_rollout.set_sampling(sampling_of(rollout, tags, greedy=False, step=step))
            batch = await parts.train_rollout.get_batch(size)
        timings["time/step_rollout"] = time.perf_counter() - t0
        metrics = rollout_metrics(batch)
        metrics["train/demonstration_step"] = float(demo is not None)
        metrics["rollout/temperature"] = rollout.generating.temperature_at(step)
        metrics["rollout/infer_batch_size/mean"] = mean(
            await parts.cluster.call(parts.policy_server, "batch_sizes")
        )
        timings.update(await parts.infer_sleep.before_training())
        timings.update(await parts.trainer_offload.reload())
        if demo is None and parts.start_reference is not None:  # before the first RL step's experience
            await parts.start_reference.take()
        if any(t.turns for t in batch.trajectories):
            trajs = batch.trajectories
            if demo is None:
                metrics.update(await self._update(trajs, timings))
            else:
                metrics.update(await self._demonstrate(demo, trajs, timings))
            self._skipped_in_a_row = 0
        else:
            metrics["train/skipped_step"] = 1.0
            self._skip("every trajectory ended before its first turn (a prompt longer than sequence_length?)")
        self.step += 1
        if self._validates():  # before the offload: the trainer scores the first RL step's rows again
            metrics.update(await self.drift.measure())
        t1 = time.perf_counter()
        timings.update(await parts.infer_sleep.before_weight_sync())
        metrics.update(await self._sync_weights())
        timings["time/step_model_update"] = time.perf_counter() - t1
        timings.update(await parts.trainer_offload.offload())  # before the next rollout or validation
        timings["time/step_total"] = time.perf_counter() - t0
        return {**metrics, **timings}

    async def _demonstrate(
        self, demo: Demonstration, trajectories: Sequence[Any], timings: dict[str, float]
    ) -> dict[str, float]:
        """A demonstration step trains only the actor, with the phase's experience, loss and rate."""
        assert self.update_actor is not None
        exp, metrics = await demo.make_experience(trajectories, timings)
        metrics.update(await self.update_actor(exp, self.step, timings, demo.loss, demo.schedule))
        return metrics

    async def _update(self, trajectories: Sequence[Any], timings: dict[str, float]) -> dict[str, float]:
        """Experience -> critic update (gae) -> actor update (after critic_warmup) -> KL controller update."""
        assert self.update_actor is not None
        exp, metrics = await self.parts.make_experience(trajectories, timings)
        # the first RL step's rows and log-probs, before its update (`trainer.drift`); without recompute the
        # old log-probs are the sampler's, so the trainer scores the rows itself
        own = self.parts.settings.experience.recompute_old_log_probs
        await self.drift.keep(
            exp.samples.tensors(), exp.samples.response_mask, exp.old_log_probs if own else None
        )
        if self.update_critic is not None:
            metrics.update(await self.update_critic(exp, self.step, timings))
        if self.step >= self.loop.critic_warmup:
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
            self.parts.kl.update(exp.kl_mean, exp.num_trajectories)
        return metrics

    def _validates(self) -> bool:
        """Whether the step just trained ends with a validation."""
        return self.step % self.loop.eval_steps == 0 or self.step == self.loop.max_steps

    def _skip(self, reason: str) -> None:
        """Log a step with nothing to train on; stop the run after too many in a row."""
        from tqdm.auto import tqdm

        self._skipped_in_a_row += 1
        tqdm.write(f"[roll] step {self.step + 1} skipped: nothing to train on: {reason}")
        if self._skipped_in_a_row >= self.loop.max_consecutive_skipped_steps:
            raise PipelineError(
                f"{self._skipped_in_a_row} steps in a row had nothing to train on ({reason}); stopping. "
                "Fix the env or the prompt budget, or raise max_consecutive_skipped_steps."
            )

    async def _sync_weights(self, force: bool = False) -> dict[str, float]:
        """Sync the trained weights to the inference worker as version `step` when due (`weight_update`); the
        version it serves is what the rollouts record and measure staleness against."""
        parts = self.parts
        metrics = await parts.update_weights(self.step, force=force)
        parts.train_rollout.set_policy_version(parts.update_weights.served_version)
        parts.val_rollout.set_policy_version(parts.update_weights.served_version)
        return metrics

    async def _validate(self) -> dict[str, float]:
        """Greedy episodes on the fixed validation seeds, in the passes of `LoopSettings.val_passes`: the flips
        are the first pass's (the same episodes at every validation); a second pass (all, at max_steps) is
        logged as val/..., the first's success beside it as val/subset/..."""
        t, parts = time.perf_counter(), self.parts
        first, *rest = self.loop.val_passes(self.step)
        batch = await self._val_batch(first)
        metrics = {**val_metrics(batch), **self.val_flips.update(batch)}
        if rest:
            subset = {
                k.replace("val/env/", SUBSET_PREFIX, 1): v
                for k, v in metrics.items()
                if k.startswith("val/env/") and k.endswith("/success")
            }
            batch = await self._val_batch(rest[0])
            metrics |= {**val_metrics(batch), **subset}
        metrics["time/step_val"] = time.perf_counter() - t
        if parts.renderer is not None:  # in a thread: the event loop (async rollout, env workers) goes on
            render = parts.renderer.render
            report = await asyncio.to_thread(render, batch.trajectories, self.step, parts.tracker.log_images)
            metrics.update(report.metrics())
        # validation's batches are not training's
        await parts.cluster.call(parts.policy_server, "batch_sizes")
        # Nor its episodes a training turn's history: a next step that reused them would prefill otherwise than
        # a run resumed at this step, which did not validate here (docs/checkpoints.md, exactness).
        await parts.cluster.call(parts.policy_server, "forget_turns")
        return metrics

    async def _val_batch(self, count: int) -> RolloutBatch:
        """The first `count` validation episodes (whole groups, one fixed seed each)."""
        rollout = self.parts.val_rollout
        return await rollout.get_batch(count, seeds=validation_seeds(count // rollout.layout.group_size))

    async def _release_memory(self) -> dict[str, float]:
        """Every worker process gives its freed heap memory back to the OS (`roll_strategies.workers.allocator`: glibc
        keeps a step's freed tensors resident otherwise); memory/rss_gb: the resident sets after, summed over
        the distinct processes (in-process workers share the driver's)."""
        parts = self.parts
        handles = [parts.policy_server]
        for group in (parts.actor_train, parts.critic, parts.reference):
            if group is not None:
                handles.extend(h for h in group.ranks if all(h is not seen for seen in handles))
        reports = await asyncio.gather(*(parts.cluster.call(h, "release_memory") for h in handles))
        rss = {report.pid: report.rss_bytes for report in reports}
        return {"memory/rss_gb": sum(rss.values()) / 2**30}

    # ----------------------------------------------------------------- checkpoints
    async def _save_checkpoint(self) -> Path:
        parts = self.parts
        state = pipeline_state(self.step, self._skipped_in_a_row, parts.rollouts, parts.kl, parts.tracker)
        state |= self.val_flips.state()

        async def save_models(path: Path) -> None:  # every rank: DeepSpeed writes each rank's shards
            offloaded = parts.trainer_offload.offloaded  # saved from the GPU: DeepSpeed reads its own buffers
            await parts.trainer_offload.reload()
            await parts.actor_train.call_all("save_checkpoint", str(path))
            if parts.critic is not None:
                await parts.critic.call_all("save_checkpoint", str(path.parent / CRITIC_DIR))
            self.drift.save(path.parent / DRIFT_FILE)
            if parts.start_reference is not None:
                await parts.start_reference.save(path.parent)
            if offloaded:
                await parts.trainer_offload.offload()

        return await parts.checkpoints.save(self.step, state, save_models)

    async def _resume(self, state: dict[str, Any]) -> None:
        """Models, optimisers, step, schedulers and KL controller from the checkpoint (the global RNGs are
        set just before the first step)."""
        parts, path = self.parts, self.parts.resume_from
        assert path is not None
        await parts.actor_train.call_all("load_checkpoint", str(parts.checkpoints.model_dir(path)))
        if parts.critic is not None:
            critic_dir = Path(path) / CRITIC_DIR
            if not critic_dir.is_dir():
                raise CheckpointError(
                    f"{path} has no {CRITIC_DIR}/ folder: it was written by a run without a critic, and"
                    f" adv_estimator={parts.settings.experience.adv_estimator} would resume with an untrained"
                    " one; resume a checkpoint of a run with a critic (e.g. gae) or start afresh"
                )
            await parts.critic.call_all("load_checkpoint", str(critic_dir))
        self.step, self._skipped_in_a_row = restore_pipeline_state(state, parts.rollouts, parts.kl)
        self.val_flips.load_state(state)
        past_start = self.step > parts.settings.demonstration_steps  # the first RL step is done
        self.drift.resumed(Path(path) / DRIFT_FILE, past_start)
        if parts.start_reference is not None:
            await parts.start_reference.resumed(Path(path), past_start)

    def close(self) -> None:
        """Stop the workers."""
        self.parts.cluster.shutdown()


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
