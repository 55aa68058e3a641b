"""Data-parallel train ranks: one trained role as N processes in one torch.distributed group.

A role with N ranks runs N copies of its train strategy, one per process (Ray actors, or processes started by
a launcher such as torchrun), in the default torch.distributed process group: gloo on the CPU, NCCL on CUDA.
Each rank runs its share of a mini-batch's micro-batches (rows balanced by tokens across ranks, e.g.
`roll_algos.balance_partitions`); the shared train loop (`train_loop.run_train_step`) adds up the step's
metrics over the ranks, the gradients are summed (hf_train, hf_critic: `DataParallel.sum_gradients`) or
reduced by DeepSpeed's ZeRO, and every rank takes the same optimiser step: the one a single rank takes on the
same rows.

`DataParallelSpec` says where a process sits (rank, world size, rendezvous address); train strategies take
one as `data_parallel=` and join the group when built (`join_group`). Without one, a launcher's RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT are used when all are set; otherwise the process is rank 0 of 1 (no
group at all for the hf strategies; DeepSpeed, which needs one, gets a one-process group on a free port).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from roll_strategies.errors import StrategyError

__all__ = ["DataParallel", "DataParallelSpec", "free_port", "join_group"]

_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
BUCKET_BYTES = 32 << 20
"""Gradients are summed in flat buckets of about this size (one collective per bucket, not per tensor)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class DataParallelSpec:
    """Where one process sits in its role's data-parallel group.

    >>> DataParallelSpec(rank=1, world_size=2, master_port=29500).env()["RANK"]
    '1'
    """

    rank: int = 0
    """This process's rank, 0 .. world_size - 1 (rank 0 writes checkpoints)."""
    world_size: int = 1
    """Ranks of the role: processes that split each mini-batch and step together."""
    master_addr: str = "127.0.0.1"
    """Host of rank 0, where the group meets (an address every rank can reach)."""
    master_port: int = 0
    """A free TCP port on `master_addr`; required when world_size > 1 (`free_port` picks one)."""

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise StrategyError(
                f"Expected 0 <= rank < world_size and world_size >= 1, got rank={self.rank}, "
                f"world_size={self.world_size}; give each of the role's N processes its own rank 0..N-1."
            )
        if self.world_size > 1 and not 0 < self.master_port < 65536:
            raise StrategyError(
                f"Expected a master_port in 1..65535 for a group of {self.world_size} ranks, got "
                f"{self.master_port}; pick one free port on master_addr (roll_strategies.free_port) for all ranks."
            )

    @classmethod
    def from_env(cls) -> DataParallelSpec | None:
        """The launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or None when any is unset."""
        if not all(v in os.environ for v in _LAUNCHER_VARS):
            return None
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            master_addr=os.environ["MASTER_ADDR"],
            master_port=int(os.environ["MASTER_PORT"]),
        )

    def env(self) -> dict[str, str]:
        """The launcher variables of this rank (what torchrun would set; LOCAL_RANK 0: one device per process)."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": os.environ.get("LOCAL_RANK", "0"),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


class DataParallel:
    """This process's place in its role's group and the few collectives the train loop needs (no-ops at size 1)."""

    def __init__(self, rank: int, size: int, device: torch.device) -> None:
        self.rank, self.size, self.device = rank, size, device

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes files every rank would write alike."""
        return self.rank == 0

    def all_gather(self, obj: Any) -> list[Any]:
        """`obj` of every rank, in rank order (a picklable object; small: metrics, counts, flags)."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def check_same(self, value: int, what: str) -> None:
        """Raise on every rank (never hang one) when the ranks' `value`s differ."""
        values = self.all_gather(value)
        if len(set(values)) > 1:
            raise StrategyError(
                f"Expected the same {what} on every rank, got {values} (rank order); ranks run their forward and "
                "backward passes together here, so give every rank as many (plan the micro-batches of all ranks "
                "together, e.g. splitting the largest ones of the ranks with fewer)."
            )

    def barrier(self) -> None:
        """Wait for every rank (e.g. until rank 0 has written a checkpoint the others read)."""
        if self.size > 1:
            torch.distributed.barrier()

    @torch.no_grad()
    def sum_gradients(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replace each tensor's `.grad` by the sum over the ranks (all-reduce, in flat buckets).

        A tensor with a gradient on some rank but none on another gets zeros there; one without a gradient on
        any rank keeps None (so the optimiser skips it, as it would on one rank)."""
        if self.size == 1:
            return
        present = torch.tensor([t.grad is not None for t in tensors], dtype=torch.uint8, device=self.device)
        torch.distributed.all_reduce(present, op=torch.distributed.ReduceOp.MAX)
        grads = []
        for tensor, has in zip(tensors, present.tolist(), strict=True):
            if has and tensor.grad is None:
                tensor.grad = torch.zeros_like(tensor)
            if has:
                grads.append(tensor.grad)
        for bucket in _buckets(grads, BUCKET_BYTES):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            torch.distributed.all_reduce(flat)
            offset = 0
            for grad in bucket:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()


def _buckets(grads: list[torch.Tensor], max_bytes: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive runs of same-dtype gradients of at most `max_bytes` (a larger tensor alone)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        if bucket and (size + nbytes > max_bytes or grad.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(grad)
        size += nbytes
    if bucket:
        yield bucket


def join_group(
    spec: DataParallelSpec | None, device: torch.device, *, need_group: bool = False
) -> DataParallel:
    """Join (initialising it if needed) the default process group of `spec`, gloo on the CPU, NCCL on CUDA.

    `spec` None: the launcher's variables when set, else rank 0 of 1. Rank 0 of 1 joins nothing (no
    collective runs) unless `need_group` (DeepSpeed wants a group): then a size-1 group is made on a free local
    port passed as `init_method` (not through the environment, so processes started later never reuse it).
    LOCAL_RANK defaults to 0. A group already initialised in this process must agree (backend, rank, size),
    else `StrategyError`.
    """
    from_env = spec is None and DataParallelSpec.from_env() is not None
    spec = spec or DataParallelSpec.from_env() or DataParallelSpec()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist = torch.distributed
    if spec.world_size == 1 and not need_group:
        return DataParallel(0, 1, device)  # alone: no collective, whatever group this process may hold
    os.environ.setdefault("LOCAL_RANK", "0")
    if device.type == "cuda":
        torch.cuda.set_device(device.index if device.index is not None else int(os.environ["LOCAL_RANK"]))
    if dist.is_initialized():
        _check_existing(spec, backend, device)
    else:
        if from_env:
            init_method = "env://"
        elif spec.world_size > 1:
            init_method = f"tcp://{spec.master_addr}:{spec.master_port}"
        else:
            init_method = f"tcp://127.0.0.1:{free_port()}"
        dist.init_process_group(backend, init_method=init_method, rank=spec.rank, world_size=spec.world_size)
    return DataParallel(spec.rank, spec.world_size, device)


def _check_existing(spec: DataParallelSpec, backend: str, device: torch.device) -> None:
    dist = torch.distributed
    if dist.get_backend() != backend:
        raise StrategyError(
            f"Expected the process group of this process to use {backend} for a train strategy on {device}, got "
            f"one already initialised with {dist.get_backend()}; CPU (gloo) and CUDA (nccl) train strategies need "
            "separate processes (e.g. separate Ray actors)."
        )
    if (dist.get_rank(), dist.get_world_size()) != (spec.rank, spec.world_size):
        raise StrategyError(
            f"Expected this process to be rank {spec.rank} of {spec.world_size}, but its process group (set up "
            f"earlier) makes it rank {dist.get_rank()} of {dist.get_world_size()}; roles with different rank counts "
            "need separate processes. Give every trained role in a process the same data_parallel spec."
        )
