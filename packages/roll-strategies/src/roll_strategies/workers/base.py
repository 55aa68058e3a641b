"""What every role's worker is (`RoleWorker`: its process set up, its strategy built by name for its role), and
the methods several roles share, written once and bound by each (as the backends bind `sync.endpoints`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.registry import Role, create_strategy
from roll_strategies.train.offload import OffloadReport
from roll_strategies.workers.allocator import ProcessMemory, configure_allocator, release_freed_memory

__all__ = [
    "RoleWorker",
    "compute_log_probs",
    "load_checkpoint",
    "offload",
    "offload_unavailable",
    "reload",
    "save_checkpoint",
    "train_step",
    "weights_fingerprint",
]


def _set_up_process(num_threads: int | None) -> None:
    """Torch's threads, and glibc's malloc set to give freed tensors back to the OS (`allocator`): a role's
    worker owns its process (a Ray actor, a rank's child) or shares the driver's (`cluster.backend=local`)."""
    configure_allocator()
    if num_threads is not None:
        torch.set_num_threads(max(1, int(num_threads)))


class RoleWorker:
    """What every role's worker does alike: its process set up (`_set_up_process`), its strategy built by name
    for `role` (`registry.create_strategy`; other kwargs go to it), and its freed heap memory given back."""

    role: ClassVar[Role]
    default_strategy: ClassVar[str]
    """The backend built when no `strategy_name` is given."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        num_threads: int | None = None,
        strategy_name: str | None = None,
        strategy_config: Mapping[str, Any] | None = None,
        **strategy_kwargs: Any,
    ) -> None:
        name = self.default_strategy if strategy_name is None else strategy_name
        _set_up_process(num_threads)
        self.strategy: Any = create_strategy(
            name, self.role, model_path, strategy_config=strategy_config, **strategy_kwargs
        )

    def release_memory(self) -> ProcessMemory:
        """Give this process's freed heap memory back to the OS (once a step); its pid and resident set after."""
        return release_freed_memory()


def compute_log_probs(
    self: RoleWorker, batch: Mapping[str, torch.Tensor], micro_batch_size: int
) -> torch.Tensor:
    """Log-probs [B, T] aligned with input_ids under the strategy's current weights (the actor's: the old
    policy's; the reference's: the reference's)."""
    return self.strategy.compute_log_probs(batch, micro_batch_size)


def train_step(
    self: RoleWorker, micro_batches: Sequence[MicroBatch], loss_fn: Callable[..., Any], **step_kwargs: Any
) -> dict[str, float]:
    """One optimiser step of the strategy over `micro_batches` (`step_kwargs` as its `train_step` takes them:
    `with_entropy`, `lr_scale`); returns the averaged metrics + grad_norm + lr."""
    return self.strategy.train_step(micro_batches, loss_fn, **step_kwargs)


def weights_fingerprint(self: RoleWorker) -> str:
    """Identifies the weights held (the train and the infer worker's are equal when they hold the same)."""
    return self.strategy.weights_fingerprint()


def offload_unavailable(self: RoleWorker) -> str | None:
    """Why `offload` cannot run with this strategy (no offload / reload, or its own `offload_unavailable`
    reason), None when it can."""
    strategy = self.strategy
    if not callable(getattr(strategy, "offload", None)) or not callable(getattr(strategy, "reload", None)):
        return f"{type(strategy).__name__} has no offload"
    unavailable = getattr(strategy, "offload_unavailable", None)
    return unavailable() if callable(unavailable) else None


def offload(self: RoleWorker) -> OffloadReport:
    """The role's model (and a trainer's gradients, fp32 masters and optimiser state) to CPU memory while a
    colocated inference engine runs (see the strategy's `offload`)."""
    return self.strategy.offload()


def reload(self: RoleWorker) -> OffloadReport:
    """Undo `offload` before the next phase that computes on this worker."""
    return self.strategy.reload()


def save_checkpoint(self: RoleWorker, path: str | Path) -> None:
    """See the strategy's `save_checkpoint`."""
    self.strategy.save_checkpoint(Path(path))


def load_checkpoint(self: RoleWorker, path: str | Path) -> None:
    """See the strategy's `load_checkpoint`."""
    self.strategy.load_checkpoint(Path(path))
