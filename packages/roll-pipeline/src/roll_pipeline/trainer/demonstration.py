"""The demonstration steps of a run (`demonstration_steps`) as one phase object, behaviour cloning before RL: its
rollout plays episodes the envs answer (`BaseEnv.demonstration`), its experience computes neither old nor
reference log-probs (the sft loss reads neither), and the actor trains on the answers with its loss and rate."""

from __future__ import annotations

from dataclasses import dataclass, replace

from roll_algos import ActorLoss
from roll_rollout import RolloutBatch, RolloutScheduler

from roll_pipeline.trainer.epochs import UpdateSchedule
from roll_pipeline.trainer.experience import ExperienceMaker

__all__ = ["Demonstration", "sft_loss"]


def sft_loss(template: ActorLoss) -> ActorLoss:
    """The loss of a demonstration step: `sft` on every response token, nothing else (the template's other
    settings, the aggregation excepted, are the run's RL settings, which an sft loss must not read)."""
    return replace(
        template,
        policy_loss="sft",
        kl_loss_coef=0.0,
        entropy_loss_coef=0.0,
        skip_confident_tokens=None,
        dual_clip=None,
        ratio_level="token",
        tis_cap=None,
    )


@dataclass(frozen=True)
class Demonstration:
    """The first `steps` steps of a run: their rollout, experience, loss and learning-rate schedule."""

    steps: int
    rollout: RolloutScheduler  # the demonstrated episodes; its env workers start at its first batch
    make_experience: ExperienceMaker  # without a reference, never recomputing the old log-probs
    loss: ActorLoss  # `sft_loss` of the run's actor loss
    schedule: UpdateSchedule  # the actor's, at demonstration_learning_rate (its `lr_factor`)

    def covers(self, step: int) -> bool:
        """Whether the step after `step` steps done is a demonstration step."""
        return step < self.steps

    async def batch(self, step: int, size: int) -> RolloutBatch:
        """The demonstrated batch of the step after `step`; the rollout's env workers stop after the last."""
        batch = await self.rollout.get_batch(size)
        if step + 1 == self.steps:
            await self.rollout.stop()
        return batch
