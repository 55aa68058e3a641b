"""How the buckets of a weight sync travel: through CPU memory, or GPU to GPU when both ends are on CUDA.

- `cpu`: buckets are packed into CPU tensors (the path of every CPU run, and of any run with a CPU end).
- `cuda_copy`: sender and receiver in one process (cluster backend `local`): the bucket stays on the sender's
  GPU and the receiver copies it device to device (peer to peer across GPUs), with no host round trip.
- `cuda_ipc`: separate processes on one GPU: pickling a bucket sends a CUDA IPC handle of its device memory
  (`torch.multiprocessing.reductions`), and the receiving process reads the sender's memory in place.
- `nccl`: separate processes on different GPUs: the bucket's data goes by `torch.distributed.broadcast` from
  the sender's rank of a process group both ends joined (`sync.broadcast.BroadcastChannel`); only its header
  is pickled.

`select_transport` picks one from the two ends' devices; the CPU path is picked whenever either end is not
on CUDA, so CPU runs send exactly what they sent before.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

import torch

__all__ = ["Transport", "device_of", "select_transport", "share_cuda"]


class Transport(StrEnum):
    """The way a weight sync's buckets travel (the `transport` of a `WeightSyncPlan`)."""

    CPU = "cpu"
    CUDA_COPY = "cuda_copy"
    CUDA_IPC = "cuda_ipc"
    NCCL = "nccl"


def device_of(end: object) -> torch.device:
    """The device of a sync end's weights: its `device` attribute (the hf strategies have one), else CPU."""
    device = getattr(end, "device", None)
    return torch.device(device) if isinstance(device, str | torch.device) else torch.device("cpu")


def select_transport(
    source: torch.device | str,
    sinks: Iterable[torch.device | str],
    *,
    same_process: bool,
    same_gpu: bool | None = None,
) -> Transport:
    """The transport from a sender on `source` to receivers on `sinks`.

    CPU unless every end is on CUDA; then `cuda_copy` in one process, `cuda_ipc` across processes on one GPU,
    `nccl` across GPUs. `same_gpu`: whether all ends share one physical GPU; None compares the device indices
    (meaningful in one process only: separate processes may number their visible GPUs differently).
    """
    ends = [torch.device(source), *(torch.device(s) for s in sinks)]
    if any(d.type != "cuda" for d in ends):
        return Transport.CPU
    if same_process:
        return Transport.CUDA_COPY
    if same_gpu is None:
        same_gpu = len({d.index or 0 for d in ends}) == 1
    return Transport.CUDA_IPC if same_gpu else Transport.NCCL


def share_cuda(tensor: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
    """(rebuild function, arguments) that reopen `tensor`'s device memory in another process (CUDA IPC).

    The sender's memory stays allocated until every receiver dropped its view (torch's IPC reference counts).
    """
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(tensor)
