"""torch.distributed set-up for backends that need a process group even in one process (DeepSpeed)."""

from __future__ import annotations

import os
import socket

import torch

from roll_strategies.errors import StrategyError

__all__ = ["ensure_process_group", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def ensure_process_group(device: torch.device) -> None:
    """Initialise the default process group once (gloo on the CPU, nccl on CUDA) and DeepSpeed's comm on it.

    Under a launcher (torchrun, deepspeed, or Ray actors given the variables) RANK / WORLD_SIZE /
    MASTER_ADDR / MASTER_PORT are set and used as they are. A lone process becomes rank 0 of 1 on a free
    local port passed as `init_method`, not through the environment, so processes it starts later (Ray
    workers inherit the environment) never reuse that port. LOCAL_RANK defaults to 0 (DeepSpeed reads it).
    """
    import deepspeed  # lazy: the deepspeed extra

    backend = "nccl" if device.type == "cuda" else "gloo"
    os.environ.setdefault("LOCAL_RANK", "0")
    if device.type == "cuda":
        torch.cuda.set_device(device.index if device.index is not None else int(os.environ["LOCAL_RANK"]))
    if torch.distributed.is_initialized() and torch.distributed.get_backend() != backend:
        raise StrategyError(
            f"Expected the process group of this process to use {backend} for a DeepSpeed strategy on "
            f"{device}, got one already initialised with {torch.distributed.get_backend()}; CPU (gloo) and "
            "CUDA (nccl) DeepSpeed strategies need separate processes (e.g. separate Ray actors)."
        )
    if not torch.distributed.is_initialized() and not all(v in os.environ for v in _LAUNCHER_VARS):
        torch.distributed.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
        )
    deepspeed.init_distributed(dist_backend=backend)
