"""`kl_reference: rl_start`: the KL term's reference becomes the policy the RL phase starts from.

At the start of the first RL step (after the demonstration steps, before that step's old log-probs and KL),
the reference takes the actor's weights as they are then: the frozen copy inside every actor_train rank for
the exact KL (`full`, `full_forward`: each rank copies its own weights), or the reference worker for the
sampled estimators (the actor's `export_weights`, the weight sync's one-shot export, loaded in place). A run
without demonstration steps takes the start weights, pretrain's. A checkpoint after that step keeps the
reference's weights (`REFERENCE_FILE`, safetensors in the reference's dtype: no pickle, restored bitwise), so
a resumed run measures against the same policy; one from before it takes them at the same step after the
resume, from the same (restored) actor.
"""

from __future__ import annotations

from pathlib import Path

from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.state.checkpoint import CheckpointError

__all__ = ["REFERENCE_FILE", "StartReference"]

REFERENCE_FILE = "kl_reference.safetensors"
"""Where a checkpoint keeps the reference's weights once it took the actor's (next to `model/`)."""


class StartReference:
    """Gives the reference the actor's weights once, at the first RL step, and carries them through checkpoints.

    `reference` is the group holding the reference: `actor_train` itself when `in_trainer` (the exact KL's
    frozen copies), else the reference worker."""

    def __init__(self, actor_train: RankGroup, reference: RankGroup, *, in_trainer: bool) -> None:
        self.actor_train, self.reference, self.in_trainer = actor_train, reference, in_trainer
        self.taken = False

    async def take(self) -> None:
        """The first call only: the reference gets the actor's weights as they are now."""
        if self.taken:
            return
        self.taken = True
        if self.in_trainer:  # every rank's copy, from its own weights (under ZeRO-3 they gather together)
            await self.actor_train.call_all("reference_from_policy")
            return
        if self.actor_train.gathers_weights:  # ZeRO-3: every rank joins the export's gather
            weights = (await self.actor_train.call_all("export_weights"))[0]
        else:
            weights = await self.actor_train.call_main("export_weights")
        await self.reference.call_all("load_weights", weights)

    async def save(self, checkpoint: Path) -> None:
        """Write the reference's weights into the `checkpoint` folder (nothing before they are taken)."""
        if self.taken:  # every rank holds the same: rank 0 writes
            await self.reference.call_main("save_reference", str(checkpoint / REFERENCE_FILE))

    async def resumed(self, checkpoint: Path, past_start: bool) -> None:
        """A resumed run: the reference's weights from `checkpoint` when it was written after they were taken
        (`past_start`); before that, `take` gives them at the first RL step as in the run never stopped."""
        if not past_start:
            return
        saved = checkpoint / REFERENCE_FILE
        if not saved.is_file():
            raise CheckpointError(
                f"{checkpoint} is past the first RL step but holds no {REFERENCE_FILE}: it was written with"
                " kl_reference: pretrained, so the policy the RL phase started from is gone; resume it with"
                " kl_reference: pretrained, or start afresh"
            )
        await self.reference.call_all("load_reference", str(saved))
        self.taken = True
