"""The actor-update phase of a step: PPO-family epochs of mini-batches over the step's `Experience`.

Micro-batches are fixed rows, dynamically batched or packed (`micro_batches.py`, per the actor_train
config); the loss is the `ActorLoss` of the config (`loss_fn`), with the KL coefficient the controller
holds now. The off-policy corrections and the KL are prepared in `experience.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from roll_strategies import lr_decay_factor

from roll_pipeline.cluster import Cluster
from roll_pipeline.config import AgenticConfig
from roll_pipeline.experience import Experience
from roll_pipeline.kl_control import KLControl
from roll_pipeline.loss import ActorLoss
from roll_pipeline.micro_batches import PaddingStats, TrainLayout, build_micro_batches, mini_batches

__all__ = ["ActorUpdater", "actor_loss", "mini_batches"]

DUAL_CLIP_C = 3.0
"""The dual-clip bound c of `dual_clip_loss` (Ye et al. 2020)."""


def actor_loss(config: AgenticConfig, kl_loss_coef: float) -> ActorLoss:
    """The actor loss a config asks for, with the KL loss coefficient in use now."""
    return ActorLoss(
        clip_low=config.pg_clip_low or config.pg_clip,
        clip_high=config.pg_clip_high or config.pg_clip,
        dual_clip=DUAL_CLIP_C if config.dual_clip_loss else None,
        agg_mode=config.loss_agg_mode,
        ratio_level=config.ratio_level,
        kl_loss_coef=kl_loss_coef if config.use_kl_loss else 0.0,
        kl_penalty=config.kl_penalty,
        entropy_loss_coef=config.entropy_loss_coef,
        skip_confident_tokens=config.skip_confident_tokens,
        skip_confident_by=config.skip_confident_by,
        entropy_scope=config.entropy_scope,
        tis_cap=config.tis_cap,
        norm_constant=float(config.sequence_length),
    )


class ActorUpdater:
    """Runs the actor update of a step on the train worker."""

    def __init__(
        self, config: AgenticConfig, cluster: Cluster, actor_train: Any, kl: KLControl, layout: TrainLayout
    ) -> None:
        self.config, self.cluster, self.actor_train, self.kl, self.layout = (
            config,
            cluster,
            actor_train,
            kl,
            layout,
        )

    def loss_fn(self) -> ActorLoss:
        """The actor loss of this config and step."""
        return actor_loss(self.config, self.kl.loss_coef)

    async def __call__(self, exp: Experience, step: int, timings: dict[str, float]) -> dict[str, float]:
        """Update the actor on `exp`; returns the actor metrics."""
        cfg = self.config
        s = exp.samples
        fields = {
            "input_ids": s.input_ids,
            "attention_mask": s.attention_mask,
            "response_mask": s.response_mask,
            "segment_ids": s.segment_ids,
            "old_log_probs": exp.old_log_probs,
            "advantages": exp.advantages,
        }
        full = {}
        if cfg.use_kl_loss and exp.ref_log_probs is not None:
            fields["ref_log_probs"] = exp.ref_log_probs
            if exp.ref_full_log_probs is not None:
                full["ref_full_log_probs"] = exp.ref_full_log_probs
        if cfg.tis_cap is not None:
            fields["rollout_log_probs"] = s.infer_log_probs
        t = time.perf_counter()
        collected, stats = await self._optimise(fields, full, step)
        timings["time/step_train"] = time.perf_counter() - t
        merged = {k: _mean([m[k] for m in collected if k in m]) for k in collected[-1]}
        metrics = {(k if "/" in k else f"actor/{k}"): v for k, v in merged.items()}
        metrics.update(stats.metrics("actor"))
        metrics["actor/sequence_packing"] = float(self.layout.mode == "packed")
        return metrics

    async def _optimise(
        self, fields: dict[str, torch.Tensor], full: dict[str, torch.Tensor], step: int
    ) -> tuple[list[dict[str, float]], PaddingStats]:
        cfg = self.config
        targs = cfg.actor_train.training_args
        loss_fn = self.loss_fn()
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        lr_scale = lr_decay_factor(targs.lr_scheduler_type, step / max(cfg.max_steps, 1), targs.min_lr_ratio)
        collected: list[dict[str, float]] = []
        stats = PaddingStats()
        rows = int(fields["input_ids"].shape[0])
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(rows, generator=generator)
            for idx in mini_batches(order, self.layout.rows_per_mini_batch):
                mbs, mb_stats = build_micro_batches(fields, idx, self.layout, cfg.loss_agg_mode, full)
                t = time.perf_counter()
                collected.append(
                    await self.cluster.call(
                        self.actor_train, "train_step", mbs, loss_fn, with_entropy=True, lr_scale=lr_scale
                    )
                )
                mb_stats.seconds = time.perf_counter() - t
                stats.add(mb_stats)
                stats.seconds += mb_stats.seconds
        return collected, stats


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0
