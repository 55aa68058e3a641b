"""What a step trains on: samples -> old / reference log-probs, values -> KL -> advantages.

Off-policy data (async_generation_ratio > 0) is corrected in one of two ways, chosen by config:
- `recompute_old_log_probs: false`: the old log-probs are the sampler's (behaviour policy), so the
  PPO ratio is pi / pi_behaviour and its clip bounds how far the update leans on stale samples;
- `recompute_old_log_probs: true`: the trainer recomputes them (pi_current); with `tis_cap`, each
  token's loss is weighted by min(pi_current / pi_behaviour, tis_cap) (truncated importance sampling).

The KL to the reference (estimator `kl_penalty`) is measured on every step that has a reference; with
`init_kl_coef > 0` it is folded into the rewards (`kl_control.kl_reward_penalty`) before the estimator
runs. The sampled estimators read the reference worker's log-probs; the exact ones (`FULL_KL_KINDS`) are
computed in the train worker, which holds a frozen copy of the reference, chunk by chunk of positions:
only [R, T] tensors (the per-token KL and the reference's log-probs) come back. Values come from the critic (gae), computed on the training rows like the log-probs. What the phase
reads of the run's config is its `ExperienceSettings` (`settings.experience_settings`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from roll_algos import FULL_KL_KINDS, AdvantageConfig, compute_advantages, masked_mean, token_kl
from roll_rollout import Trajectory

from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.kl_control import KLControl, kl_reward_penalty
from roll_pipeline.trainer.samples import Samples, SampleShape, TurnView, build_samples
from roll_pipeline.trainer.signal import signal_metrics

__all__ = ["Experience", "ExperienceMaker", "ExperienceSettings", "explained_variance", "step_advantages"]


@dataclass(frozen=True)
class ExperienceSettings:
    """What the experience phase reads of a run's config."""

    sample_shape: SampleShape  # the training rows: one per turn (`step`) or one per trajectory
    recompute_old_log_probs: bool  # the train worker recomputes the old log-probs (else: the sampler's)
    adv_estimator: str  # a registered advantage estimator (roll_algos `compute_advantages`)
    advantage: AdvantageConfig  # the estimator's discount, options (lambda, GiGPO's), normalisation, clips
    kl_penalty: str  # the KL estimator against the reference (`token_kl`; a `FULL_KL_KINDS` one is exact)
    actor_batch_size: int  # rows per forward of the train worker's log-prob and exact-KL passes
    reference_batch_size: int  # rows per forward of the reference's log-prob passes
    critic_batch_size: int  # rows per forward of the critic's value pass
    measure_signal: bool = True  # measure the share of the batch that teaches nothing (not for sft)


@dataclass
class Experience:
    """The training data of one step, every per-token tensor [R, T] in the training rows' layout."""

    samples: Samples
    old_log_probs: torch.Tensor
    ref_log_probs: torch.Tensor | None
    values: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor
    kl_mean: float | None  # measured KL(pi_old || ref) per response token
    num_trajectories: int


def step_advantages(
    samples: Samples,
    estimator: str,
    config: AdvantageConfig,
    turns: TurnView | None = None,
    values: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns [R, T] of a step's samples in the training rows' layout: the registered
    `estimator` runs on the turn view (`turns`, e.g. with the KL reward penalty folded in; default the
    samples' own), given the per-token `values` and log-probs [R, T] of the training rows (None: absent)."""
    view = samples if turns is None else replace(samples, turns=turns)
    out = compute_advantages(estimator, view.advantage_inputs(values, old_log_probs, ref_log_probs), config)
    return samples.to_train(out.advantages), samples.to_train(out.returns)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the valid tokens (1: perfect critic, <= 0: useless)."""
    m = mask.bool()
    var = float(returns[m].var()) if int(m.sum()) > 1 else 0.0
    return 1.0 - float((returns - values)[m].var()) / var if var > 0 else 0.0


class ExperienceMaker:
    """Builds a step's `Experience` with the train, reference and critic workers (each a `RankGroup`: the
    rows are shared out over a trained role's ranks).

    `reference` holds the reference model, None without a KL: a `ReferenceWorker` for the sampled estimators
    (`compute_log_probs`), or, for the exact `FULL_KL_KINDS`, the train worker's ranks themselves, built with
    a frozen copy of the reference (`compute_reference_kl`). The demonstration steps have a maker of their own
    (`trainer.demonstration`): without a reference, never recomputing the old log-probs."""

    def __init__(
        self,
        settings: ExperienceSettings,
        actor_train: RankGroup,
        reference: RankGroup | None,
        critic: RankGroup | None,
        kl: KLControl,
        pad_id: int,
    ) -> None:
        self.settings, self.kl, self.pad_id = settings, kl, pad_id
        self.actor_train, self.reference, self.critic = actor_train, reference, critic

    async def __call__(
        self, trajs: Sequence[Trajectory], timings: dict[str, float]
    ) -> tuple[Experience, dict[str, float]]:
        """The experience of `trajs` (whole groups) and its metrics."""
        cfg = self.settings
        samples = build_samples(trajs, self.pad_id, cfg.sample_shape)
        tensors = samples.tensors()
        mask = samples.response_mask
        metrics: dict[str, float] = {"train/rows": float(samples.num_rows)}
        t = time.perf_counter()
        if cfg.recompute_old_log_probs:
            old_lp = await self.actor_train.map_rows("compute_log_probs", tensors, cfg.actor_batch_size)
            metrics["actor/train_infer_logprob_diff"] = float(
                (old_lp - samples.infer_log_probs)[mask].abs().mean()
            )
        else:  # the sampler's own log-probs (see the module docstring)
            old_lp = samples.infer_log_probs
        timings["time/step_old_log_probs"] = time.perf_counter() - t
        ref_lp = kl_tokens = None
        if self.reference is not None:
            t = time.perf_counter()
            ref_lp, kl_tokens = await self._reference(samples, old_lp)
            timings["time/step_ref_log_probs"] = time.perf_counter() - t
        values = None
        if self.critic is not None:
            t = time.perf_counter()
            values = await self.critic.map_rows("compute_values", tensors, cfg.critic_batch_size)
            timings["time/step_values"] = time.perf_counter() - t
        t = time.perf_counter()
        turns = samples.turns
        kl_mean = None
        if kl_tokens is not None:
            kl_mean = float(masked_mean(kl_tokens, mask))
            metrics["critic/kl"] = kl_mean
            if self.kl.reward_coef > 0:
                turns = kl_reward_penalty(turns, samples.to_turns(kl_tokens), self.kl.reward_coef)
        metrics.update(self.kl.metrics())
        advantages, returns = step_advantages(
            samples, cfg.adv_estimator, cfg.advantage, turns, values, old_lp, ref_lp
        )
        timings["time/step_adv"] = time.perf_counter() - t
        metrics.update(_advantage_metrics(advantages, returns, values, mask))
        if cfg.measure_signal:  # what share of the batch teaches nothing (`trainer.signal`)
            inputs = replace(samples, turns=turns).advantage_inputs(values, old_lp, ref_lp)
            metrics.update(signal_metrics(cfg.adv_estimator, inputs, cfg.advantage))
        exp = Experience(samples, old_lp, ref_lp, values, advantages, returns, kl_mean, len(trajs))
        return exp, metrics

    async def _reference(self, samples: Samples, old_lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference log-probs and the per-token KL (the exact kinds: from the train worker's own pass)."""
        cfg, tensors, mask = self.settings, samples.tensors(), samples.response_mask
        assert self.reference is not None
        if cfg.kl_penalty not in FULL_KL_KINDS:
            ref_lp = await self.reference.map_rows("compute_log_probs", tensors, cfg.reference_batch_size)
            return ref_lp, token_kl(old_lp, ref_lp, mask, cfg.kl_penalty)
        # The current weights are the old policy: the worker compares them with its frozen reference.
        exact = await self.reference.map_rows("compute_reference_kl", tensors, cfg.actor_batch_size)
        kl = exact.kl if cfg.kl_penalty == "full" else exact.kl_forward
        return exact.ref_log_probs, token_kl(old_lp, exact.ref_log_probs, mask, cfg.kl_penalty, exact=kl)


def _advantage_metrics(
    advantages: torch.Tensor, returns: torch.Tensor, values: torch.Tensor | None, mask: torch.Tensor
) -> dict[str, float]:
    m = mask.bool()
    out = {
        "critic/advantages/mean": float(advantages[m].mean()),
        "critic/advantages/max": float(advantages[m].max()),
        "critic/advantages/min": float(advantages[m].min()),
        "critic/returns/mean": float(returns[m].mean()),
    }
    if values is not None:
        out["critic/values/mean"] = float(values[m].mean())
        out["critic/vf_explained_var"] = explained_variance(values, returns, m)
    return out
