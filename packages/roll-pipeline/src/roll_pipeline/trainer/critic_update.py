"""The critic-update phase of a step (adv_estimator=gae): value-loss epochs over the step's `Experience`.

The critic regresses the GAE returns of the rows it valued (`Experience.values` are its old values, the
anchor of `value_clip`). Mini-batches and micro-batches follow the critic's own `training_args` and
batching settings; its learning rate decays like the actor's (`lr_scheduler_type`, `min_lr_ratio`), and its
epochs loop is the actor's (`epochs.train_epochs`).
"""

from __future__ import annotations

from roll_algos import CriticLoss

from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.epochs import UpdateSchedule, train_epochs
from roll_pipeline.trainer.experience import Experience
from roll_pipeline.trainer.micro_batches import TrainLayout

__all__ = ["CriticUpdater"]


class CriticUpdater:
    """Runs the critic update of a step on the critic's ranks with the run's value loss `loss`."""

    def __init__(
        self, critic: RankGroup, layout: TrainLayout, schedule: UpdateSchedule, loss: CriticLoss
    ) -> None:
        self.critic, self.layout, self.schedule, self.loss = critic, layout, schedule, loss

    async def __call__(self, exp: Experience, step: int, timings: dict[str, float]) -> dict[str, float]:
        """Update the critic on `exp`; returns the critic metrics."""
        if exp.values is None:
            raise ValueError("the critic update needs the step's values (compute them before the advantages)")
        s = exp.samples
        fields = s.tensors()
        fields["old_values"] = exp.values
        fields["returns"] = exp.returns
        metrics, timings["time/step_critic_train"] = await train_epochs(
            self.critic,
            self.loss,
            fields,
            self.layout,
            self.schedule,
            step,
            agg_mode="token-mean",
            prefix="critic",
            groups=s.row_groups,
        )
        return metrics
