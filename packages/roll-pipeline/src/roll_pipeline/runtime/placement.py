"""Which backend and which devices each role gets: the config's `strategy_args`, `device_mapping`,
`num_gpus_per_worker` and `model_args.gguf_file`, turned into plain worker arguments (the config-time check
of each role's strategy is `roll_pipeline.config.strategies`).

- `strategy_kwargs(role)`: `strategy_name` / `strategy_config` for the role worker's constructor;
- `plan_placement(roles, backend)`: the torch device and the Ray GPU request of each role;
- `model_folder(pretrain_path, roles)`: the model folder every role loads (a GGUF converted once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_pipeline.config.roles import WorkerConfig

__all__ = [
    "Placement",
    "model_folder",
    "plan_placement",
    "strategy_kwargs",
]


def strategy_kwargs(role: WorkerConfig) -> dict[str, Any]:
    """The role worker's `strategy_name` / `strategy_config` arguments."""
    return {
        "strategy_name": role.strategy_args.strategy_name,
        "strategy_config": dict(role.strategy_args.strategy_config),
    }


@dataclass(frozen=True)
class Placement:
    """Where one role's worker runs."""

    device: str
    """torch device inside the worker: "cpu", "cuda" (Ray picks the GPU via CUDA_VISIBLE_DEVICES), "cuda:N"."""
    num_gpus: float
    """GPUs the Ray actor asks for (0 on the CPU and in-process)."""


def plan_placement(roles: Mapping[str, WorkerConfig], backend: str) -> dict[str, Placement]:
    """Device and Ray GPU request of each role.

    - an empty `device_mapping`: the CPU, no GPU;
    - in-process (`backend="local"`): `cuda:<first index>`, no Ray request;
    - under Ray: `num_gpus_per_worker` when set; otherwise the role's GPUs divided among the roles mapped to
      them (colocated roles share a GPU: 3 roles on [0] ask for 1/3 each; a role alone on [1] asks for 1).
    """
    per_gpu = Counter(gpu for role in roles.values() for gpu in set(role.device_mapping))
    placements = {}
    for name, role in roles.items():
        mapping = role.device_mapping
        if not mapping:
            placements[name] = Placement("cpu", 0.0)
        elif backend == "local":
            placements[name] = Placement(f"cuda:{mapping[0]}", 0.0)
        elif role.num_gpus_per_worker is not None:
            placements[name] = Placement("cuda", float(role.num_gpus_per_worker))
        else:
            sharing = max(per_gpu[gpu] for gpu in mapping)
            placements[name] = Placement("cuda", len(set(mapping)) / sharing)
    return placements


def model_folder(pretrain_path: str | Path, roles: Mapping[str, WorkerConfig]) -> Path | str:
    """The folder every role loads: `pretrain_path`, or the cached HF conversion of the roles' `gguf_file`.

    The roles share one model, so they must name the same file (or leave `gguf_file` null).
    """
    files = {role.model_args.gguf_file for role in roles.values()} - {None}
    if not files:
        return pretrain_path
    if len(files) > 1:
        raise ValueError(
            f"Expected one model_args.gguf_file for all roles (they load one model), got "
            f"{ {n: r.model_args.gguf_file for n, r in roles.items()} }; set the same file, or null, in each."
        )
    from roll_strategies import ensure_model_folder

    return ensure_model_folder(pretrain_path, files.pop())


def optimiser_kwargs(role: WorkerConfig) -> dict[str, Any]:
    """The optimiser arguments of a trained role's strategy."""
    targs = role.training_args
    return {
        "learning_rate": targs.learning_rate,
        "weight_decay": targs.weight_decay,
        "betas": (targs.adam_beta1, targs.adam_beta2),
        "eps": targs.adam_epsilon,
        "max_grad_norm": targs.max_grad_norm,
        "warmup_steps": targs.warmup_steps,
    }
