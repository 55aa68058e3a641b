"""The actor-update phase of a step: PPO-family epochs of mini-batches over the step's `Experience`.

Micro-batches are fixed rows, dynamically batched or packed (`micro_batches.py`, per the actor_train
config); the epochs loop is the one the critic runs too (`epochs.train_epochs`). The loss is the run's
`ActorLoss` template (`settings.actor_loss_template`) with the KL coefficient the controller holds now
(`loss_fn`). The off-policy corrections and the KL are prepared in `experience.py`; the exact KL of the loss
(`FULL_KL_KINDS`) is computed by the train worker against the frozen reference it holds (`with_full_kl`).
"""

from __future__ import annotations

from dataclasses import replace

from roll_algos import FULL_KL_KINDS, ActorLoss

from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.epochs import UpdateSchedule, train_epochs
from roll_pipeline.trainer.experience import Experience
from roll_pipeline.trainer.kl_control import KLControl
from roll_pipeline.trainer.micro_batches import TrainLayout

__all__ = ["ActorUpdater"]


class ActorUpdater:
    """Runs the actor update of a step on the train worker's ranks (`actor_train`).

    `loss`: the actor loss of the run, its `kl_loss_coef` set each step; `use_kl_loss`: whether the loss has
    a KL term (the reference's log-probs then travel with the micro-batches, or, for the exact estimators,
    the train worker computes the KL with its reference; its coefficient is the controller's `loss_coef`;
    else 0)."""

    def __init__(
        self,
        actor_train: RankGroup,
        kl: KLControl,
        layout: TrainLayout,
        schedule: UpdateSchedule,
        loss: ActorLoss,
        use_kl_loss: bool,
    ) -> None:
        self.actor_train, self.kl, self.layout = actor_train, kl, layout
        self.schedule, self.loss, self.use_kl_loss = schedule, loss, use_kl_loss

    def loss_fn(self) -> ActorLoss:
        """The actor loss of this run and step."""
        return replace(self.loss, kl_loss_coef=self.kl.loss_coef if self.use_kl_loss else 0.0)

    async def __call__(
        self,
        exp: Experience,
        step: int,
        timings: dict[str, float],
        loss: ActorLoss | None = None,
        schedule: UpdateSchedule | None = None,
    ) -> dict[str, float]:
        """Update the actor on `exp`; returns the actor metrics. `loss` and `schedule`: a phase's own (the
        demonstration steps'); None: `loss_fn()` and the run's schedule."""
        loss_fn = loss or self.loss_fn()
        s = exp.samples
        fields = s.tensors()
        fields["segment_ids"] = s.segment_ids
        fields["old_log_probs"] = exp.old_log_probs
        fields["advantages"] = exp.advantages
        if self.use_kl_loss and exp.ref_log_probs is not None:
            fields["ref_log_probs"] = exp.ref_log_probs
        if loss_fn.tis_cap is not None:
            fields["rollout_log_probs"] = s.infer_log_probs
        with_full_kl = loss_fn.kl_loss_coef > 0 and loss_fn.kl_penalty in FULL_KL_KINDS
        metrics, timings["time/step_train"] = await train_epochs(
            self.actor_train,
            loss_fn,
            fields,
            self.layout,
            schedule or self.schedule,
            step,
            agg_mode=loss_fn.agg_mode,
            prefix="actor",
            groups=s.row_groups,
            with_entropy=True,
            with_full_kl=with_full_kl,
        )
        metrics["actor/sequence_packing"] = float(self.layout.mode == "packed")
        return metrics
