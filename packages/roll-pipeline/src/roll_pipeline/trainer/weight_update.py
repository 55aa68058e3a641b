"""The weight-update phase of a step: trained weights -> inference worker, bucketed and versioned.

Every `model_update_frequency` steps the train worker's weights go to the policy server through
roll_strategies' bucketed sync (one bucket in flight at a time; under Ray each bucket travels from the
train actor to the inference actor without passing through the driver; with several data-parallel ranks,
rank 0's, the others joining each bucket's gather under ZeRO-3: `RankGroup`), in the inference role's dtype,
as policy version `step`. Nothing is sent when the inference side holds those weights already (equal
fingerprints): only the version moves. The version the server reports back is the one the rollout
records on every turn it samples, and staleness is measured against it (docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from roll_strategies import DEFAULT_BUCKET_BYTES, weight_sync_due
from roll_strategies.sync.weight_sync import sync_metrics

from roll_pipeline.runtime.cluster import Cluster
from roll_pipeline.runtime.ranks import RankGroup

__all__ = ["WeightUpdater"]


class WeightUpdater:
    """Syncs `source` (the `ActorTrainWorker` ranks) into `sink` (a `PolicyServer` handle on `cluster`)."""

    def __init__(
        self,
        cluster: Cluster,
        source: RankGroup,
        sink: Any,
        *,
        dtype: str,
        frequency: int = 1,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        self.cluster = cluster
        self.source = source
        self.sink = sink
        self.dtype = dtype
        self.frequency = frequency
        self.bucket_bytes = bucket_bytes
        self.served_version = 0

    def due(self, step: int) -> bool:
        """Whether step `step` syncs (every `frequency` steps, step 0 included)."""
        return weight_sync_due(step, self.frequency)

    async def __call__(self, step: int, *, force: bool = False) -> dict[str, float]:
        """Sync as version `step` if due (or `force`); returns weight_sync/* metrics.

        Metrics: bytes, seconds, mb_per_s, buckets, skipped (1 when no transfer happened: not due, or the
        weights were held already), version (served after this call) and policy_lag (step - version).
        """
        if force or self.due(step):
            metrics = await self._sync(step)
        else:
            metrics = {**sync_metrics(0, 0.0, 0), "weight_sync/skipped": 1.0}
        metrics["weight_sync/version"] = float(self.served_version)
        metrics["weight_sync/policy_lag"] = float(step - self.served_version)
        return metrics

    async def _sync(self, version: int) -> dict[str, float]:
        call, started = self.cluster.call, time.perf_counter()
        fingerprint = await self.source.call_main("weights_fingerprint")
        if fingerprint == await call(self.sink, "weights_fingerprint"):
            self.served_version = await call(self.sink, "confirm_weights", version, fingerprint)
            return {**sync_metrics(0, time.perf_counter() - started, 0), "weight_sync/skipped": 1.0}
        plan = await self.source.weight_sync_plan(version, dtype=self.dtype, bucket_bytes=self.bucket_bytes)
        for index in range(plan.num_buckets):
            bucket, gathered = self.source.weight_bucket(plan, index)  # not awaited: worker to worker
            await asyncio.gather(call(self.sink, "receive_weight_bucket", bucket), gathered)
        self.served_version = await call(self.sink, "get_policy_version")
        if self.served_version != version:
            raise RuntimeError(
                f"Expected the inference worker to serve version {version} after the sync, got "
                f"{self.served_version}; the update was not applied."
            )
        return sync_metrics(plan.total_bytes, time.perf_counter() - started, plan.num_buckets)
