"""How far the policy has moved from the one the RL phase started from (`signal/kl_to_start/*`).

The first RL step's batch is kept with the trainer's log-probs of its sampled response tokens under the
weights before that step's update: samples of the start policy pi_0, scored by pi_0 itself. At each
validation the same tokens are scored by the current policy pi, and KL(pi_0 || pi) is estimated on them:
`k1`, the mean of log pi_0 - log pi (unbiased, can dip below 0 on few tokens), and `k3` (unbiased, >= 0;
`roll_algos.kl_penalty`). Exact for what it says: the tokens are pi_0's own samples, so no importance
weight enters; it costs one log-prob pass over one step's rows per validation. Where a run clones first,
the start is the cloned policy. A checkpoint keeps the batch (`DRIFT_FILE`, safetensors: no pickle), so a
resumed run measures against the same start; one resumed from a checkpoint without it logs none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from roll_algos import MicroBatch, kl_penalty, masked_mean

__all__ = ["DRIFT_FILE", "StartDrift", "kl_to_start"]

DRIFT_FILE = "start_drift.safetensors"
"""Where a checkpoint keeps the first RL step's rows and their log-probs."""


def kl_to_start(start: torch.Tensor, now: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """`signal/kl_to_start/k1` and `/k3`: KL(pi_0 || pi) per response token (`mask`) from pi_0's samples'
    log-probs under pi_0 (`start`) and under pi (`now`), [R, T] each."""
    m = mask.bool()
    return {
        "signal/kl_to_start/k1": float(masked_mean(start - now, m)),
        "signal/kl_to_start/k3": float(masked_mean(kl_penalty(start, now, "k3"), m)),
    }


class StartDrift:
    """Keeps the first RL step's rows and log-probs, and measures the KL to them on demand."""

    def __init__(self, actor_train: Any, batch_size: int) -> None:
        self.actor_train, self.batch_size = actor_train, batch_size
        self._kept: tuple[MicroBatch, torch.Tensor, torch.Tensor] | None = None
        self._done = False

    async def keep(self, tensors: MicroBatch, mask: torch.Tensor, log_probs: torch.Tensor | None):
        """The rows of the first call only; `log_probs`: the trainer's, of the weights before the update (None:
        scored here, e.g. when the old log-probs are the sampler's)."""
        if self._done:
            return
        self._done = True
        if log_probs is None:
            log_probs = await self.actor_train.map_rows("compute_log_probs", tensors, self.batch_size)
        self._kept = (tensors, mask, log_probs)

    def save(self, path: Path) -> None:
        """Write the kept rows and log-probs to `path` (nothing before the first RL step)."""
        if self._kept is None:
            return
        from safetensors.torch import save_file

        tensors, mask, start = self._kept
        rows = {f"row/{k}": v.detach().cpu().clone() for k, v in tensors.items()}  # no shared storage
        save_file({**rows, "mask": mask.cpu().clone(), "start": start.detach().cpu().clone()}, path)

    def resumed(self, path: Path, past_start: bool) -> None:
        """A resumed run: the kept rows from `path` where the checkpoint has them; none past the start without."""
        if path.is_file():
            from safetensors.torch import load_file

            saved = load_file(path)
            rows = {k.removeprefix("row/"): v for k, v in saved.items() if k.startswith("row/")}
            self._kept, self._done = (rows, saved["mask"], saved["start"]), True
        elif past_start:
            self._done = True

    async def measure(self) -> dict[str, float]:
        """The KL to the start policy now, {} before the first RL step or after a resume past it."""
        if self._kept is None:
            return {}
        tensors, mask, start = self._kept
        now = await self.actor_train.map_rows("compute_log_probs", tensors, self.batch_size)
        return kl_to_start(start, now, mask)
