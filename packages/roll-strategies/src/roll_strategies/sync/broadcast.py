"""`BroadcastChannel`: the `nccl` transport's data path, a bucket's data by `torch.distributed.broadcast`."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from roll_strategies.errors import WeightSyncError
from roll_strategies.sync.weight_sync import WeightBucket

__all__ = ["BroadcastChannel"]


class BroadcastChannel:
    """Moves bucket data by `torch.distributed.broadcast` from rank `src` of `group` (NCCL across GPUs).

    The header of a bucket (`header`: the bucket without its data) reaches the receivers by any means (a Ray
    call); then the sender calls `send(bucket)` while each receiver calls `receive(header)` and gives the
    result to its `WeightReceiver`. Every rank of `group` must call its side for every bucket, in the same
    order, and no other collective of the group may run in between.
    """

    def __init__(self, *, src: int, device: torch.device | str, group: Any = None) -> None:
        self.src = src
        self.device = torch.device(device)
        self.group = group

    @staticmethod
    def header(bucket: WeightBucket) -> WeightBucket:
        """`bucket` without its data: an empty CPU tensor of its dtype in place of `data`."""
        return dataclasses.replace(bucket, data=torch.empty(0, dtype=bucket.data.dtype))

    def send(self, bucket: WeightBucket) -> None:
        """Broadcast `bucket.data` (returns once the receivers have it, or once it is queued on NCCL's stream)."""
        import torch.distributed as dist

        dist.broadcast(bucket.data.to(self.device), self.src, group=self.group)

    def receive(self, header: WeightBucket) -> WeightBucket:
        """The bucket of `header` with its data received from the sender into this rank's device."""
        import torch.distributed as dist

        if header.data.numel():
            raise WeightSyncError(
                f"Expected a bucket header (no data) from BroadcastChannel.header, got bucket {header.index} with "
                f"{header.data.numel()} elements; pass the header, not the bucket."
            )
        numel = sum(s.stop - s.start for s in header.slices)
        data = torch.empty(numel, dtype=header.data.dtype, device=self.device)
        dist.broadcast(data, self.src, group=self.group)
        return dataclasses.replace(header, data=data)
