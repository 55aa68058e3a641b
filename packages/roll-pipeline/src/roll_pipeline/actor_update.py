"""The actor-update phase of a step: rows -> old / reference log-probs -> advantages -> PPO mini-batches.

Off-policy data (async_generation_ratio > 0) is corrected in one of two ways, chosen by config:
- `recompute_old_log_probs: false`: the old log-probs are the sampler's (behaviour policy), so the
  PPO ratio is pi / pi_behaviour and its clip bounds how far the update leans on stale samples;
- `recompute_old_log_probs: true`: the trainer recomputes them (pi_current); with `tis_cap`, each
  token's loss is weighted by min(pi_current / pi_behaviour, tis_cap) (truncated importance sampling).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from roll_algos import AdvantageConfig, compute_advantages
from roll_rollout import Trajectory
from roll_strategies import lr_decay_factor

from roll_pipeline.batch import RowBatch, build_rows
from roll_pipeline.cluster import Cluster
from roll_pipeline.config import AgenticConfig
from roll_pipeline.loss import ActorLoss


class ActorUpdater:
    """Runs the actor update of a step on the train (and reference) workers."""

    def __init__(
        self, config: AgenticConfig, cluster: Cluster, actor_train: Any, reference: Any | None, pad_id: int
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.actor_train = actor_train
        self.reference = reference
        self.pad_id = pad_id

    async def __call__(
        self, trajs: Sequence[Trajectory], step: int, timings: dict[str, float]
    ) -> dict[str, float]:
        """Update the actor on `trajs` (whole groups); returns the actor/critic metrics."""
        cfg = self.config
        rows = build_rows(trajs, pad_id=self.pad_id)
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
        else:  # the sampler's own log-probs (see the module docstring)
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
        metrics = await self._optimise(rows, old_lp, ref_lp, adv.advantages, step)
        timings["time/step_train"] = time.perf_counter() - t
        mask = rows.response_mask
        metrics["critic/advantages/mean"] = float(adv.advantages[mask].mean())
        metrics["critic/advantages/max"] = float(adv.advantages[mask].max())
        metrics["critic/advantages/min"] = float(adv.advantages[mask].min())
        if cfg.recompute_old_log_probs:
            metrics["actor/train_infer_logprob_diff"] = float(
                (old_lp - rows.infer_log_probs)[mask].abs().mean()
            )
        return metrics

    def loss_fn(self) -> ActorLoss:
        """The actor loss of this config."""
        cfg = self.config
        return ActorLoss(
            clip_low=cfg.pg_clip_low or cfg.pg_clip,
            clip_high=cfg.pg_clip_high or cfg.pg_clip,
            dual_clip=3.0 if cfg.dual_clip_loss else None,
            agg_mode=cfg.loss_agg_mode,
            kl_loss_coef=cfg.kl_loss_coef if cfg.use_kl_loss else 0.0,
            kl_penalty=cfg.kl_penalty,
            entropy_loss_coef=cfg.entropy_loss_coef,
            skip_confident_tokens=cfg.skip_confident_tokens,
            tis_cap=cfg.tis_cap,
        )

    async def _optimise(
        self,
        rows: RowBatch,
        old_lp: torch.Tensor,
        ref_lp: torch.Tensor | None,
        advantages: torch.Tensor,
        step: int,
    ) -> dict[str, float]:
        cfg = self.config
        targs = cfg.actor_train.training_args
        loss_fn = self.loss_fn()
        fields = {
            "input_ids": rows.input_ids,
            "attention_mask": rows.attention_mask,
            "response_mask": rows.response_mask,
            "old_log_probs": old_lp,
            "advantages": advantages,
        }
        if ref_lp is not None:
            fields["ref_log_probs"] = ref_lp
        if cfg.tis_cap is not None:
            fields["rollout_log_probs"] = rows.infer_log_probs
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        micro = targs.per_device_train_batch_size
        per_step = micro * targs.gradient_accumulation_steps
        lr_scale = lr_decay_factor(targs.lr_scheduler_type, step / max(cfg.max_steps, 1), targs.min_lr_ratio)
        collected: list[dict[str, float]] = []
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(rows.num_rows, generator=generator)
            for idx in mini_batches(order, per_step):
                mbs = []
                for m in range(0, len(idx), micro):
                    sub = idx[m : m + micro]
                    mb = {k: v[sub] for k, v in fields.items()}
                    mb["loss_scale"] = torch.tensor(len(sub) / len(idx))
                    mbs.append(trim_padding(mb))
                collected.append(
                    await self.cluster.call(
                        self.actor_train, "train_step", mbs, loss_fn, with_entropy=True, lr_scale=lr_scale
                    )
                )
        merged = {k: _mean([m[k] for m in collected if k in m]) for k in collected[-1]}
        return {(k if "/" in k else f"actor/{k}"): v for k, v in merged.items()}


def mini_batches(order: torch.Tensor, max_rows: int) -> list[torch.Tensor]:
    """Split row indices into the fewest mini-batches of at most `max_rows`, as equal as possible.

    Why equal: every mini-batch gets a full optimiser step, and Adam's step size does not shrink with
    the batch, so a remainder of a few rows would be one noisy full-size step per rollout.
    """
    count = max(1, -(-len(order) // max_rows))
    return [chunk for chunk in torch.tensor_split(order, count) if len(chunk)]


def trim_padding(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cut the columns that are padding in every row of the micro-batch."""
    width = int(mb["attention_mask"].sum(dim=1).max())
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in mb.items()}


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0
