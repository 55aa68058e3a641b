"""The weight-sync methods of the backends, written once: each backend binds them in its class body.

An inference backend (hf_infer, vllm) keeps its `WeightReceiver` as `self.receiver`; a train backend (hf_train,
deepspeed_train) keeps its `WeightExporter` as `self.exporter`. The `InferStrategy` / `TrainStrategy` Protocols
need the sync methods on the backend itself, and each is one call on that helper, so a backend names these
functions as its methods instead of writing them again:

    class HFInferStrategy:
        receive_weight_bucket = endpoints.receive_weight_bucket
        weights_fingerprint = endpoints.received_fingerprint

Composition, not a base class: nothing is inherited, and a backend's body still lists every method it offers.
A backend whose method does more than the call (vllm's `update_weights` converts numpy arrays first) writes
its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
import torch

from roll_strategies.sync.weight_receiver import WeightReceiver
from roll_strategies.sync.weight_sync import WeightBucket, WeightExporter, WeightSyncPlan

__all__ = [
    "HoldsExporter",
    "HoldsReceiver",
    "confirm_weights",
    "exported_fingerprint",
    "policy_version",
    "receive_weight_bucket",
    "received_fingerprint",
    "update_weights",
    "weight_bucket",
    "weight_sync_plan",
]


class HoldsReceiver(Protocol):
    """An inference backend: weights arrive through its `receiver`."""

    receiver: WeightReceiver


class HoldsExporter(Protocol):
    """A train backend: weights leave through its `exporter`."""

    exporter: WeightExporter


# ----------------------------------------------------------------- the receiving end (inference backends)
def _policy_version(self: HoldsReceiver) -> int:
    return self.receiver.policy_version


policy_version = property(_policy_version, doc="Version of the weights held (0 until the first update).")
"""The `policy_version` property of an inference backend."""


def update_weights(
    self: HoldsReceiver, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int
) -> None:
    """Load `named_tensors` (e.g. a train strategy's `export_weights()`) in place, strictly; set the version.

    A version older than the one held raises `StaleWeightsError` (weights unchanged).
    """
    self.receiver.replace(named_tensors, version)


def receive_weight_bucket(self: HoldsReceiver, bucket: WeightBucket) -> dict[str, float] | None:
    """Stage one bucket of a bucketed update; the last one applies it (see `WeightReceiver.receive`)."""
    return self.receiver.receive(bucket)


def confirm_weights(self: HoldsReceiver, version: int, fingerprint: str) -> None:
    """Record `version` without a transfer when the sender's weights are the ones held here."""
    self.receiver.confirm(version, fingerprint)


def received_fingerprint(self: HoldsReceiver) -> str:
    """Fingerprint of the weights held (the sender's, after a bucketed update)."""
    return self.receiver.fingerprint


# ----------------------------------------------------------------- the sending end (train backends)
def exported_fingerprint(self: HoldsExporter) -> str:
    """Identifies the current weights (changes with every train step and checkpoint load)."""
    return self.exporter.fingerprint()


def weight_sync_plan(
    self: HoldsExporter, version: int, *, dtype: str, bucket_bytes: int, transport: str = "cpu"
) -> WeightSyncPlan:
    """Plan of a bucketed update of the current weights as `version` in the inference `dtype`, its buckets
    travelling by `transport` (`sync.transport.Transport`; "cpu" unless both ends are on CUDA)."""
    return self.exporter.plan(version, dtype=dtype, bucket_bytes=bucket_bytes, transport=transport)


def weight_bucket(self: HoldsExporter, plan: WeightSyncPlan, index: int) -> WeightBucket:
    """Bucket `index` of `plan`, a tensor in the plan's dtype, on the CPU (on the weights' GPU with a GPU
    transport); under ZeRO-3 only that bucket's parameters are gathered."""
    return self.exporter.bucket(plan, index)
