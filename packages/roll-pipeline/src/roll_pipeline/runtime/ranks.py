"""`RankGroup`: the workers of one role, called as one: N data-parallel ranks of a trained role (or the one
worker of any other role).

What fans out to the ranks, and how:

- `train_step(per_rank, loss_fn, ...)`: rank r gets its own micro-batches (`build_micro_batches` plans one list
  per rank); every rank returns the group's metrics (`roll_strategies.train.train_loop`), rank 0's are kept;
- `map_rows(method, batch, micro_batch_size)` (log-probs, values, the exact KL): the rows are cut into N
  contiguous shares of equal size, the last padded with copies of the first row, so every rank runs as many
  forwards (ZeRO-3 gathers the weights inside each); the results are put back in row order;
- weight export (`weight_sync_plan`, `weight_bucket`): rank 0 serves the buckets, by the sync's transport;
  under ZeRO-3 (`gathers_weights`) every rank joins each bucket's gather with its own plan (a plan carries its
  rank's fingerprint; the other ranks' on the CPU path), and only rank 0's bucket travels;
- `call_all` (checkpoints: every rank saves and loads; the hf strategies write from rank 0 after a barrier,
  DeepSpeed writes every rank's shards) and `call_main` (rank 0 alone: fingerprint, step, probes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import torch
from roll_algos import MicroBatch

from roll_pipeline.runtime.cluster import Cluster

__all__ = ["RankGroup", "row_shares"]


def row_shares(rows: int, ranks: int) -> list[torch.Tensor]:
    """Row indices of each rank: contiguous shares of ceil(rows / ranks) rows, the last ones short (or empty)
    and padded with row 0, so every rank gets as many rows; the shares joined start with the `rows` real ones in
    order (`_unshard`)."""
    per = -(-rows // ranks)
    out = []
    for rank in range(ranks):
        real = torch.arange(min(rank * per, rows), min((rank + 1) * per, rows))
        out.append(torch.cat([real, torch.zeros(per - len(real), dtype=torch.long)]))
    return out


def _take(value: Any, index: torch.Tensor) -> Any:
    """The rows `index` of a batch value (tensors with a row dimension; other values as they are)."""
    return value[index] if isinstance(value, torch.Tensor) and value.dim() >= 1 else value


def _unshard(parts: Sequence[Any], rows: int) -> Any:
    """The ranks' results (a tensor [rows_r, ...] or a NamedTuple of them) back in one, padding dropped."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts))[:rows]
    if isinstance(first, tuple):
        fields = [_unshard([p[i] for p in parts], rows) for i in range(len(first))]
        return type(first)(*fields)
    raise TypeError(f"Expected tensors or NamedTuples of tensors from the ranks, got {type(first).__name__}")


class RankGroup:
    """The handles of one role's workers in rank order, and the calls the pipeline makes on them.

    `gathers_weights`: reading the weights is a collective (DeepSpeed ZeRO-3), so every rank joins each
    export."""

    def __init__(self, cluster: Cluster, ranks: Sequence[Any], *, gathers_weights: bool = False) -> None:
        if not ranks:
            raise ValueError("Expected at least one worker handle in a RankGroup, got none.")
        self.cluster, self.ranks = cluster, list(ranks)
        self.gathers_weights = gathers_weights and len(self.ranks) > 1
        self._plans: list[Any] = []

    @property
    def size(self) -> int:
        """The number of ranks."""
        return len(self.ranks)

    @property
    def main(self) -> Any:
        """Rank 0's handle."""
        return self.ranks[0]

    def call_main(self, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """`method` on rank 0 alone (what every rank would answer alike)."""
        return self.cluster.call(self.main, method, *args, **kwargs)

    async def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """`method` on every rank at once with the same arguments; their results in rank order."""
        return list(
            await asyncio.gather(*(self.cluster.call(r, method, *args, **kwargs) for r in self.ranks))
        )

    async def map_rows(self, method: str, batch: Mapping[str, Any], micro_batch_size: int) -> Any:
        """`method(batch_share, micro_batch_size)` on each rank's share of the rows (`row_shares`), the results
        joined in row order: log-probs, values [B, T], or a NamedTuple of such (`ReferenceKL`)."""
        rows = int(batch["input_ids"].shape[0])
        if self.size == 1:
            return await self.call_main(method, batch, micro_batch_size)
        shares = row_shares(rows, self.size)
        calls = [
            self.cluster.call(rank, method, {k: _take(v, index) for k, v in batch.items()}, micro_batch_size)
            for rank, index in zip(self.ranks, shares, strict=True)
        ]
        return _unshard(await asyncio.gather(*calls), rows)

    async def train_step(
        self, per_rank: Sequence[Sequence[MicroBatch]], loss_fn: Any, **kwargs: Any
    ) -> dict[str, float]:
        """One optimiser step of the group: rank r on `per_rank[r]`; the group's metrics (rank 0's)."""
        if len(per_rank) != self.size:
            raise ValueError(f"Expected micro-batches for {self.size} ranks, got {len(per_rank)} lists.")
        calls = [
            self.cluster.call(rank, "train_step", list(mbs), loss_fn, **kwargs)
            for rank, mbs in zip(self.ranks, per_rank, strict=True)
        ]
        return (await asyncio.gather(*calls))[0]

    async def weight_sync_plan(
        self, version: int, *, dtype: str, bucket_bytes: int, transport: str = "cpu"
    ) -> Any:
        """Rank 0's plan of a bucketed update (every rank makes its own when the export gathers), its buckets
        travelling by `transport` (`roll_strategies.sync.transport`). The other ranks' buckets come back to
        the caller and are dropped, so they stay on the CPU path whatever rank 0's transport."""
        # the CPU path calls the workers without `transport`, as before there was a choice
        gpu = {} if transport == "cpu" else {"transport": transport}
        if not self.gathers_weights:
            return await self.call_main(
                "weight_sync_plan", version, dtype=dtype, bucket_bytes=bucket_bytes, **gpu
            )
        calls = [
            self.cluster.call(
                rank, "weight_sync_plan", version, dtype=dtype, bucket_bytes=bucket_bytes, **extra
            )
            for rank, extra in zip(self.ranks, [gpu] + [{}] * (self.size - 1), strict=True)
        ]
        self._plans = list(await asyncio.gather(*calls))
        return self._plans[0]

    def weight_bucket(self, plan: Any, index: int) -> tuple[Any, Awaitable[Any]]:
        """(rank 0's bucket `index` of `plan`, not awaited: it goes worker to worker; an awaitable of the other
        ranks' part in the gather, done when they are)."""
        bucket = self.cluster.call(self.main, "weight_bucket", plan, index)
        if not self.gathers_weights:
            return bucket, asyncio.sleep(0)
        if not self._plans or self._plans[0] != plan:
            raise ValueError("Expected the plan of this group's last weight_sync_plan, got another one.")
        others = [
            self.cluster.call(rank, "weight_bucket", own, index)
            for rank, own in zip(self.ranks[1:], self._plans[1:], strict=True)
        ]
        return bucket, asyncio.gather(*others)
