"""The critic-update phase of a step (adv_estimator=gae): value-loss epochs over the step's `Experience`.

The critic regresses the GAE returns of the rows it valued (`Experience.values` are its old values, the
anchor of `value_clip`). Mini-batches and micro-batches follow the critic's own `training_args` and
batching settings; its learning rate decays like the actor's (`lr_scheduler_type`, `min_lr_ratio`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from roll_strategies import lr_decay_factor

from roll_pipeline.cluster import Cluster
from roll_pipeline.config import AgenticConfig
from roll_pipeline.experience import Experience
from roll_pipeline.loss import CriticLoss
from roll_pipeline.micro_batches import PaddingStats, TrainLayout, build_micro_batches, mini_batches

__all__ = ["CriticUpdater"]


class CriticUpdater:
    """Runs the critic update of a step on the critic worker."""

    def __init__(self, config: AgenticConfig, cluster: Cluster, critic: Any, layout: TrainLayout) -> None:
        self.config, self.cluster, self.critic, self.layout = config, cluster, critic, layout

    async def __call__(self, exp: Experience, step: int, timings: dict[str, float]) -> dict[str, float]:
        """Update the critic on `exp`; returns the critic metrics."""
        cfg = self.config
        if exp.values is None:
            raise ValueError("the critic update needs the step's values (compute them before the advantages)")
        s = exp.samples
        fields = {
            "input_ids": s.input_ids,
            "attention_mask": s.attention_mask,
            "response_mask": s.response_mask,
            "old_values": exp.values,
            "returns": exp.returns,
        }
        targs = cfg.critic.training_args
        lr_scale = lr_decay_factor(targs.lr_scheduler_type, step / max(cfg.max_steps, 1), targs.min_lr_ratio)
        loss_fn = CriticLoss(cfg.value_clip)
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_033 + step)
        collected: list[dict[str, float]] = []
        stats = PaddingStats()
        t0 = time.perf_counter()
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(s.num_rows, generator=generator)
            for idx in mini_batches(order, self.layout.rows_per_mini_batch):
                mbs, mb_stats = build_micro_batches(fields, idx, self.layout, "token-mean")
                t = time.perf_counter()
                collected.append(
                    await self.cluster.call(self.critic, "train_step", mbs, loss_fn, lr_scale=lr_scale)
                )
                mb_stats.seconds = time.perf_counter() - t
                stats.add(mb_stats)
                stats.seconds += mb_stats.seconds
        timings["time/step_critic_train"] = time.perf_counter() - t0
        keys = collected[-1].keys()
        merged = {k: sum(m[k] for m in collected) / len(collected) for k in keys}
        metrics = {(k if "/" in k else f"critic/{k}"): v for k, v in merged.items()}
        metrics.update(stats.metrics("critic"))
        return metrics
