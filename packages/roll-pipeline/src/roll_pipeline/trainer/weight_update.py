"""The weight-update phase of a step: trained weights -> inference worker, bucketed and versioned.

Every `model_update_frequency` steps the train worker's weights go to the policy server through
roll_strategies' bucketed sync (one bucket in flight at a time; under Ray each bucket travels from the
train actor to the inference actor without passing through the driver; with several data-parallel ranks,
rank 0's, the others joining each bucket's gather under ZeRO-3: `RankGroup`), in the inference role's dtype,
as policy version `step`. Nothing is sent when the inference side holds those weights already (equal
fingerprints): only the version moves. The version the server reports back is the one the rollout
records on every turn it samples, and staleness is measured against it (docs/rollout.md).

How the buckets travel (`roll_strategies.sync.transport`) follows from the two roles' plans
(`pick_transport`): through CPU memory when either end is on the CPU; GPU to GPU when both are on CUDA: a
device copy when the trainer and the policy server share the driver's process (`cluster.backend=local`, one
train rank), CUDA IPC between processes on one GPU (Ray actors on the same pool GPU; a local rank process on
the server's device). Processes on different GPUs would take an NCCL broadcast, which needs a process group
joining the train rank and the server; the pipeline builds none, so that case goes through CPU memory, and
the run's startup line says so.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple

import torch
from roll_strategies import DEFAULT_BUCKET_BYTES, weight_sync_due
from roll_strategies.sync.transport import Transport, select_transport
from roll_strategies.sync.weight_sync import sync_metrics

from roll_pipeline.runtime.cluster import Cluster
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.runtime.workers import RolePlan

__all__ = ["TransportChoice", "WeightUpdater", "pick_transport"]

GPU_TRANSPORT_STRATEGIES = frozenset({"hf_infer"})
"""Inference strategies that keep GPU buckets on the GPU. vLLM hands the weights to its engine as CPU bytes
(`collective_rpc`), so a GPU transport would only add a GPU copy of the model next to the engine's reserve."""


class TransportChoice(NamedTuple):
    """The transport of a run's weight syncs and why it was picked (the run's startup line)."""

    transport: Transport
    reason: str

    def __str__(self) -> str:
        return f"{self.transport.value} ({self.reason})"


def _gpus(plan: RolePlan, rank_zero: bool) -> tuple[int, ...]:
    """The pool GPUs a Ray worker of `plan` runs on (rank 0's alone when `rank_zero` and it has ranks)."""
    gpus = plan.gpus.gpus if plan.gpus is not None else ()
    return gpus[:1] if rank_zero and plan.ranks > 1 else gpus


def pick_transport(backend: str, train: RolePlan, infer: RolePlan) -> TransportChoice:
    """How the buckets go from `train`'s rank 0 to the `infer` worker, from their plans and `backend`.

    The CPU unless both ends are on CUDA and the inference strategy loads GPU tensors as they are
    (`GPU_TRANSPORT_STRATEGIES`); then `cuda_copy` in one process (local backend, one train rank), `cuda_ipc`
    across processes on one GPU, and across GPUs the CPU again: `nccl` needs a process group of both ends,
    which the pipeline does not build.
    """
    source, sink = torch.device(train.rank_devices[0]), torch.device(infer.device)
    if source.type != "cuda" or sink.type != "cuda":
        return TransportChoice(Transport.CPU, f"a CPU end: actor_train on {source}, actor_infer on {sink}")
    name = infer.strategy.get("strategy_name", "hf_infer")
    if name not in GPU_TRANSPORT_STRATEGIES:
        return TransportChoice(Transport.CPU, f"actor_infer's {name} loads the weights from CPU memory")
    same_process = backend == "local" and train.ranks == 1
    if backend == "local":
        same_gpu = (source.index or 0) == (sink.index or 0)  # one process's numbering: comparable
        where = f"actor_train on {source}, actor_infer on {sink}"
    else:
        train_gpus, infer_gpus = _gpus(train, rank_zero=True), _gpus(infer, rank_zero=False)
        if not train_gpus or not infer_gpus:
            return TransportChoice(
                Transport.CPU, "a role asks Ray for no GPU of the pool (num_gpus_per_worker 0)"
            )
        same_gpu = len({*train_gpus, *infer_gpus}) == 1
        where = f"actor_train on pool GPU(s) {list(train_gpus)}, actor_infer on {list(infer_gpus)}"
    transport = select_transport(source, [sink], same_process=same_process, same_gpu=same_gpu)
    if transport is Transport.NCCL:
        return TransportChoice(
            Transport.CPU,
            f"{where}: GPU to GPU would take nccl, which needs a process group joining both, and the "
            "pipeline builds none, so the buckets go through CPU memory",
        )
    process = "one process" if same_process else "separate processes, one GPU"
    return TransportChoice(transport, f"{where}: {process}")


class WeightUpdater:
    """Syncs `source` (the `ActorTrainWorker` ranks) into `sink` (a `PolicyServer` handle on `cluster`), the
    buckets travelling by `transport` (`pick_transport`; "cpu": through CPU memory)."""

    def __init__(
        self,
        cluster: Cluster,
        source: RankGroup,
        sink: Any,
        *,
        dtype: str,
        frequency: int = 1,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        transport: Transport | str = Transport.CPU,
    ) -> None:
        self.cluster = cluster
        self.source = source
        self.sink = sink
        self.dtype = dtype
        self.frequency = frequency
        self.bucket_bytes = bucket_bytes
        self.transport = Transport(transport)
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
        plan = await self.source.weight_sync_plan(
            version, dtype=self.dtype, bucket_bytes=self.bucket_bytes, transport=self.transport.value
        )
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
