"""Versioned, bucketed weight sync from a train strategy to inference strategies.

The sender (a train strategy) describes an update with a `WeightSyncPlan`: the tensors, the inference
dtype, and buckets of at most `bucket_bytes` bytes each (a large tensor is split across buckets as flat
slices). It then serves the buckets one at a time (`WeightBucket`: one flat tensor of the plan's dtype),
so neither side ever holds more than one bucket in flight. The receiver (`WeightReceiver`) stages the
buckets and swaps the weights in only when the last one arrived in order; a stale version, a bucket
missing or out of order, or tensors that do not match its model raise `WeightSyncError` and leave the
old weights in place.

    plan = train.weight_sync_plan(version, dtype="bfloat16", bucket_bytes=64 << 20)
    for index in range(plan.num_buckets):
        metrics = infer.receive_weight_bucket(train.weight_bucket(plan, index))

`sync_weights` runs exactly that (plus the skip when nothing changed) for in-process workers.

Buckets travel through CPU memory unless both ends are on CUDA: then the plan's `transport`
(`sync.transport`) keeps them on the GPU (a device copy in one process, CUDA IPC across processes on
one GPU, an NCCL broadcast across GPUs).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from dataclasses import fields as fields_of
from typing import Any, Protocol

import torch

from roll_strategies.errors import StrategyError, WeightSyncError
from roll_strategies.models._loading import resolve_dtype
from roll_strategies.sync.transport import Transport, device_of, select_transport, share_cuda
from roll_strategies.sync.weights import tensor_shape, unique_named_tensors

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "TensorSpec",
    "WeightBucket",
    "WeightExporter",
    "WeightSink",
    "WeightSlice",
    "WeightSource",
    "WeightSyncPlan",
    "pack_bucket",
    "plan_buckets",
    "sync_metrics",
    "sync_weights",
    "weight_sync_due",
]

DEFAULT_BUCKET_BYTES = 64 << 20
"""64 MiB: the default upper bound on the bytes of one bucket."""


@dataclass(frozen=True)
class TensorSpec:
    """Name and shape of one tensor of an update."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class WeightSlice:
    """Elements [start, stop) of the flattened tensor `name`."""

    name: str
    start: int
    stop: int


@dataclass(frozen=True)
class WeightSyncPlan:
    """What one update sends: tensors, the dtype they travel and land in, and the bucket layout."""

    version: int
    """Policy version the receiver records once the update is complete."""
    fingerprint: str
    """Identifies the sender's weights (instance + revision): equal fingerprints mean equal weights."""
    dtype: str
    """Inference dtype name ("float32", "bfloat16", ...): buckets are converted on the sender side."""
    tensors: tuple[TensorSpec, ...]
    buckets: tuple[tuple[WeightSlice, ...], ...]
    bucket_bytes: int
    transport: str = Transport.CPU.value
    """How the buckets travel (`sync.transport.Transport`): "cpu" packs them into CPU tensors; the others keep
    them on the sender's GPU."""

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self.buckets)

    @property
    def total_bytes(self) -> int:
        """Bytes of all tensors in the plan's dtype."""
        return sum(t.numel for t in self.tensors) * resolve_dtype(self.dtype).itemsize


@dataclass(frozen=True)
class WeightBucket:
    """One bucket of an update: `data` holds the plan's slices of `index`, concatenated (1-D, plan dtype)."""

    version: int
    fingerprint: str
    index: int
    num_buckets: int
    slices: tuple[WeightSlice, ...]
    data: torch.Tensor
    plan: WeightSyncPlan | None = None
    """The whole plan, carried by bucket 0 only (the receiver allocates its staging buffers from it)."""
    transport: str = Transport.CPU.value
    """The plan's transport: on "cuda_ipc" pickling sends a CUDA IPC handle of `data` instead of its bytes."""

    @property
    def nbytes(self) -> int:
        """Bytes of `data`."""
        return self.data.numel() * self.data.element_size()

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.transport != Transport.CUDA_IPC.value or not self.data.is_cuda:
            return object.__reduce_ex__(self, protocol)
        fields = {f.name: getattr(self, f.name) for f in fields_of(self) if f.name != "data"}
        return rebuild_bucket, (fields, share_cuda(self.data))


def rebuild_bucket(fields: dict[str, Any], shared: tuple[Any, tuple[Any, ...]]) -> WeightBucket:
    """A bucket unpickled from `WeightBucket.__reduce_ex__` on the IPC path: its data is the sender's memory."""
    rebuild, args = shared
    return WeightBucket(**fields, data=rebuild(*args))


def plan_buckets(
    tensors: Sequence[TensorSpec], *, bucket_bytes: int, itemsize: int
) -> list[list[WeightSlice]]:
    """Greedy bucket layout: each bucket holds at most max(1, bucket_bytes // itemsize) elements.

    A tensor that fits in the current bucket goes there whole; one that fits in an empty bucket starts a
    new one; a larger one is split into slices filling consecutive buckets. Every element of every tensor
    lands in exactly one slice, in order.
    """
    if bucket_bytes < 1 or itemsize < 1:
        raise StrategyError(f"Expected bucket_bytes >= 1 and itemsize >= 1, got {bucket_bytes}, {itemsize}.")
    capacity = max(1, bucket_bytes // itemsize)
    buckets: list[list[WeightSlice]] = []
    current: list[WeightSlice] = []
    used = 0
    for spec in tensors:
        numel = spec.numel
        if used and used + numel > capacity and numel <= capacity:
            buckets.append(current)
            current, used = [], 0
        start = 0
        while start < numel:
            take = min(numel - start, capacity - used)
            current.append(WeightSlice(spec.name, start, start + take))
            used += take
            start += take
            if used == capacity:
                buckets.append(current)
                current, used = [], 0
    if current:
        buckets.append(current)
    return buckets


def pack_bucket(
    plan: WeightSyncPlan, index: int, tensors: Mapping[str, torch.Tensor], *, fingerprint: str
) -> WeightBucket:
    """Bucket `index` of `plan` from full tensors `tensors` (name -> tensor, any device/dtype), on the CPU (on
    the tensors' device when the plan's transport is not "cpu").

    `fingerprint` is the sender's current one: a mismatch with the plan's means the weights changed since
    the plan was made (a train step in between), which would mix two weight versions.
    """
    if fingerprint != plan.fingerprint:
        raise WeightSyncError(
            f"Expected the weights the plan was made from ({plan.fingerprint}), but the sender now holds "
            f"{fingerprint}: a train step or checkpoint load ran mid-sync. Make a new plan after it."
        )
    if not 0 <= index < plan.num_buckets:
        raise WeightSyncError(f"Expected a bucket index in [0, {plan.num_buckets}), got {index}.")
    dtype = resolve_dtype(plan.dtype)
    slices = plan.buckets[index]
    # packed into CPU tensors, or (GPU transports) where the weights are; torch.cat copies, so the bucket never
    # aliases them
    to = "cpu" if plan.transport == Transport.CPU.value else None
    parts = [tensors[s.name].detach().reshape(-1)[s.start : s.stop].to(to, dtype) for s in slices]
    device = parts[0].device if parts else torch.device("cpu")
    return WeightBucket(
        version=plan.version,
        fingerprint=plan.fingerprint,
        index=index,
        num_buckets=plan.num_buckets,
        slices=slices,
        data=torch.cat([p.to(device) for p in parts]) if parts else torch.empty(0, dtype=dtype),
        plan=plan if index == 0 else None,
        transport=plan.transport,
    )


def weight_sync_due(step: int, model_update_frequency: int) -> bool:
    """Whether pipeline step `step` syncs weights: every `model_update_frequency` steps, step 0 included."""
    if model_update_frequency < 1:
        raise StrategyError(f"Expected model_update_frequency >= 1, got {model_update_frequency}.")
    return step % model_update_frequency == 0


def sync_metrics(nbytes: int, seconds: float, buckets: int) -> dict[str, float]:
    """weight_sync/{bytes, seconds, mb_per_s, buckets, skipped} of one transfer (skipped = 0)."""
    return {
        "weight_sync/bytes": float(nbytes),
        "weight_sync/seconds": seconds,
        "weight_sync/mb_per_s": nbytes / 1e6 / seconds if seconds > 0 else 0.0,
        "weight_sync/buckets": float(buckets),
        "weight_sync/skipped": 0.0,
    }


class WeightSource(Protocol):
    """The sending side (train strategies and `ActorTrainWorker`)."""

    def weights_fingerprint(self) -> str: ...

    def weight_sync_plan(self, version: int, *, dtype: str, bucket_bytes: int) -> WeightSyncPlan: ...

    def weight_bucket(self, plan: WeightSyncPlan, index: int) -> WeightBucket: ...


class WeightSink(Protocol):
    """The receiving side (inference strategies and `ActorInferWorker`)."""

    def weights_fingerprint(self) -> str: ...

    def receive_weight_bucket(self, bucket: WeightBucket) -> dict[str, float] | None: ...

    def confirm_weights(self, version: int, fingerprint: str) -> None: ...


def sync_weights(
    source: WeightSource,
    sinks: WeightSink | Sequence[WeightSink],
    *,
    version: int,
    dtype: str,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    force: bool = False,
    transport: Transport | str | None = None,
) -> dict[str, float]:
    """Send `source`'s weights to each sink as `version`, bucket by bucket; skip sinks that hold them already.

    Returns weight_sync/{bytes, seconds, mb_per_s, buckets, skipped}, measured end to end (packing,
    transfer, staging and applying), summed over sinks. With `force`, sends even unchanged weights.
    `transport` None picks it from the ends' `device` attributes (`sync.transport.select_transport`, in one
    process): a device copy when all are on CUDA, CPU memory otherwise.
    """
    targets = [sinks] if not isinstance(sinks, Sequence) else list(sinks)
    started = time.perf_counter()
    fingerprint = source.weights_fingerprint()
    todo = [s for s in targets if force or s.weights_fingerprint() != fingerprint]
    for sink in targets:
        if sink not in todo:
            sink.confirm_weights(version, fingerprint)
    if not todo:
        return {**sync_metrics(0, time.perf_counter() - started, 0), "weight_sync/skipped": 1.0}
    if transport is None:
        transport = select_transport(device_of(source), [device_of(s) for s in todo], same_process=True)
    transport = Transport(transport)
    if transport is Transport.CPU:  # the call every source takes (the CPU path sends what it always sent)
        plan = source.weight_sync_plan(version, dtype=dtype, bucket_bytes=bucket_bytes)
    else:
        plan = source.weight_sync_plan(
            version, dtype=dtype, bucket_bytes=bucket_bytes, transport=transport.value
        )
    sent = 0
    for index in range(plan.num_buckets):
        bucket = source.weight_bucket(plan, index)
        sent += bucket.nbytes * len(todo)
        for sink in todo:
            sink.receive_weight_bucket(bucket)
    return sync_metrics(sent, time.perf_counter() - started, plan.num_buckets)


class WeightExporter:
    """Sender side of one model: its fingerprint (instance + revision), plans and buckets.

    `gather(tensors)` is a context manager making partitioned tensors whole (ZeRO-3); None for plain models.
    `tensors()` gives the named tensors to send (default: the model's `unique_named_tensors`; a mixed-precision
    trainer passes its float32 masters). Call `bump()` whenever the weights change (a train step, a load).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        gather: Callable[[list[torch.Tensor]], AbstractContextManager[object]] | None = None,
        tensors: Callable[[], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        self.model = model
        self.gather = gather or (lambda tensors: nullcontext())
        self.tensors = tensors or (lambda: unique_named_tensors(model))
        self.instance = uuid.uuid4().hex[:12]
        self.revision = 0

    def bump(self) -> None:
        """The weights changed: later plans carry a new fingerprint."""
        self.revision += 1

    def fingerprint(self) -> str:
        """ "<instance>:<revision>": equal strings mean equal weights."""
        return f"{self.instance}:{self.revision}"

    def plan(
        self, version: int, *, dtype: str, bucket_bytes: int, transport: str = Transport.CPU.value
    ) -> WeightSyncPlan:
        """The plan of an update of the current weights as `version`, in `dtype`, bucketed, sent by `transport`."""
        tensors = tuple(TensorSpec(n, tensor_shape(t)) for n, t in self.tensors().items())
        itemsize = resolve_dtype(dtype).itemsize
        layout = plan_buckets(tensors, bucket_bytes=bucket_bytes, itemsize=itemsize)
        return WeightSyncPlan(
            version=int(version),
            fingerprint=self.fingerprint(),
            dtype=str(resolve_dtype(dtype)).removeprefix("torch."),
            tensors=tensors,
            buckets=tuple(tuple(b) for b in layout),
            bucket_bytes=int(bucket_bytes),
            transport=Transport(transport).value,
        )

    def bucket(self, plan: WeightSyncPlan, index: int) -> WeightBucket:
        """Bucket `index` of `plan` (gathers only the tensors this bucket touches)."""
        if not 0 <= index < plan.num_buckets:
            raise WeightSyncError(f"Expected a bucket index in [0, {plan.num_buckets}), got {index}.")
        live = self.tensors()
        names = list(dict.fromkeys(s.name for s in plan.buckets[index]))
        with torch.no_grad(), self.gather([live[n] for n in names]):
            return pack_bucket(plan, index, {n: live[n] for n in names}, fingerprint=self.fingerprint())
