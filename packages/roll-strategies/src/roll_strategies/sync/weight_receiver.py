"""`WeightReceiver`: the inference side of weight sync; stages buckets and applies only complete updates."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np
import torch

from roll_strategies.errors import StaleWeightsError, WeightSyncError
from roll_strategies.models._loading import resolve_dtype
from roll_strategies.sync.transport import Transport
from roll_strategies.sync.weight_sync import WeightBucket, WeightSyncPlan, sync_metrics

__all__ = ["WeightReceiver"]


class WeightReceiver:
    """Inference-side staging of bucketed updates, applied only once complete and in order.

    `expected` maps every tensor name the model needs to its shape; `apply` copies a complete
    {name: tensor} dict into the model. Staging buffers are in the plan's dtype, on the CPU; with a GPU
    transport (`sync.transport`) on the GPU the first bucket arrived on, so the update never crosses the host.
    """

    def __init__(
        self,
        expected: Mapping[str, tuple[int, ...]],
        apply: Callable[[dict[str, np.ndarray | torch.Tensor]], None],
        *,
        fingerprint: str = "initial",
    ) -> None:
        self.expected = {name: tuple(shape) for name, shape in expected.items()}
        self.apply = apply
        self.policy_version = 0
        self.fingerprint = fingerprint
        self.aborted_updates = 0
        self._plan: WeightSyncPlan | None = None
        self._staged: dict[str, torch.Tensor] = {}
        self._next = 0
        self._started = 0.0
        self._bytes = 0

    def _check_version(self, version: int) -> None:
        if version < self.policy_version:
            raise StaleWeightsError(
                f"Expected a weight update of version >= {self.policy_version} (the weights held now), got "
                f"version {version}; the old weights are kept. A delayed or replayed sync reached this "
                "worker: send the trainer's current weights with the current pipeline step."
            )

    def _check_shapes(self, got: Mapping[str, tuple[int, ...]]) -> None:
        missing = sorted(set(self.expected) - set(got))
        unexpected = sorted(set(got) - set(self.expected))
        shapes = [
            f"{n}: expected {self.expected[n]}, got {s}"
            for n, s in got.items()
            if n in self.expected and tuple(s) != self.expected[n]
        ]
        if missing or unexpected or shapes:
            raise WeightSyncError(
                "Expected an update with exactly the receiving model's tensors; "
                f"missing={missing[:5]} ({len(missing)}), unexpected={unexpected[:5]} ({len(unexpected)}), "
                f"shape mismatches={shapes[:5]}. Fix: train and infer roles must load the same model folder."
            )

    def abort(self) -> None:
        """Drop a pending (incomplete) update; the current weights stay."""
        if self._plan is not None:
            self.aborted_updates += 1
        self._plan, self._staged, self._next = None, {}, 0

    def receive(self, bucket: WeightBucket) -> dict[str, float] | None:
        """Stage `bucket`; after the last one, apply the update and return its metrics (else None)."""
        try:
            return self._receive(bucket)
        except StaleWeightsError:  # a replayed old bucket: an update in flight stays valid
            raise
        except WeightSyncError:
            self.abort()
            raise

    def _receive(self, bucket: WeightBucket) -> dict[str, float] | None:
        self._check_version(bucket.version)
        if bucket.index == 0:
            if self._plan is not None:  # the sender restarted: the unfinished update can never complete
                self.abort()
            if bucket.plan is None:
                raise WeightSyncError("Expected bucket 0 to carry the update's plan, got none.")
            self._check_shapes({t.name: t.shape for t in bucket.plan.tensors})
            self._plan, self._next = bucket.plan, 0
            self._started, self._bytes = time.perf_counter(), 0
            dtype = resolve_dtype(bucket.plan.dtype)
            device = (
                bucket.data.device if bucket.plan.transport != Transport.CPU.value else torch.device("cpu")
            )
            self._staged = {
                t.name: torch.empty(t.numel, dtype=dtype, device=device) for t in bucket.plan.tensors
            }
        plan = self._plan
        if plan is None or bucket.index != self._next or bucket.fingerprint != plan.fingerprint:
            expected = (
                "bucket 0 of a new update"
                if plan is None
                else f"bucket {self._next} of {plan.num_buckets} ({plan.fingerprint})"
            )
            raise WeightSyncError(
                f"Expected {expected}, got bucket {bucket.index} of {bucket.num_buckets} (version "
                f"{bucket.version}, {bucket.fingerprint}): a bucket is missing or out of order, so this partial "
                "update is rejected and the old weights are kept. Resend the whole update from bucket 0."
            )
        if bucket.version != plan.version or bucket.slices != plan.buckets[bucket.index]:
            raise WeightSyncError(
                f"Expected bucket {bucket.index} of version {plan.version} with the plan's slices, got version "
                f"{bucket.version} with other slices; resend the whole update from bucket 0."
            )
        offset = 0
        for piece in bucket.slices:
            size = piece.stop - piece.start
            self._staged[piece.name][piece.start : piece.stop] = bucket.data[offset : offset + size]
            offset += size
        if offset != bucket.data.numel():
            raise WeightSyncError(
                f"Expected {offset} elements in bucket {bucket.index}, got {bucket.data.numel()}."
            )
        self._bytes += bucket.nbytes
        self._next += 1
        if self._next < plan.num_buckets:
            return None
        shapes = {t.name: t.shape for t in plan.tensors}
        self.apply({name: flat.view(shapes[name]) for name, flat in self._staged.items()})
        seconds = time.perf_counter() - self._started
        self.policy_version, self.fingerprint = plan.version, plan.fingerprint
        self._plan, self._staged, self._next = None, {}, 0
        return sync_metrics(self._bytes, seconds, plan.num_buckets)

    def replace(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int) -> None:
        """One-shot update (`update_weights`): stale versions and foreign tensors are refused, then applied."""
        self._check_version(version)
        self._check_shapes({n: tuple(v.shape) for n, v in named_tensors.items()})
        self.abort()
        self.apply(dict(named_tensors))
        self.policy_version, self.fingerprint = int(version), f"update_weights:{int(version)}"

    def confirm(self, version: int, fingerprint: str) -> None:
        """Record `version` without a transfer: the sender's weights (`fingerprint`) are the ones held here."""
        self._check_version(version)
        if fingerprint != self.fingerprint:
            raise WeightSyncError(
                f"Expected the fingerprint of the weights held here ({self.fingerprint}) to skip the transfer, got "
                f"{fingerprint}; send the update instead."
            )
        self.policy_version = int(version)
