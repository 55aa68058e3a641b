"""`Cluster`: what the pipeline needs from a worker placement backend; `RayCluster` (`cluster.py`) and
`LocalCluster` (`local_cluster.py`) subclass it, sharing `spawn`'s keywords (a `WorkerSpec` each)."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from roll_pipeline.runtime.gpu_pool import GpuSlots

__all__ = ["Cluster", "CpuCapacity", "WorkerSpec"]


@dataclass(frozen=True)
class CpuCapacity:
    """The CPUs Ray can hand out to the run's actors."""

    available: float
    """CPUs free on the alive nodes together."""
    largest_node: float
    """CPUs of the largest alive node: no single actor can ask for more."""
    can_grow: bool
    """An existing cluster (it may autoscale or be shared): a plan that does not fit is a warning, not an error."""


class Cluster(Protocol):
    """The operations the pipeline needs from a worker placement backend."""

    def spawn(
        self,
        cls: type,
        *args: Any,
        name: str,
        num_cpus: float = 0,
        num_gpus: float = 0,
        gpus: GpuSlots | None = None,
        **kwargs: Any,
    ) -> Any:
        """Create a worker of `cls`; return a handle. With `gpus` (under Ray) it runs on those GPUs of the run's
        GPU pool."""
        return self._spawn(WorkerSpec(cls, args, kwargs, name, num_cpus, num_gpus, gpus))

    def spawn_ranks(
        self,
        cls: type,
        *args: Any,
        name: str,
        rank_kwargs: Sequence[Mapping[str, Any]],
        num_cpus: float = 0,
        num_gpus: float = 0,
        gpus: GpuSlots | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Create the data-parallel ranks of one role: rank r is `cls(*args, **kwargs, **rank_kwargs[r],
        data_parallel=DataParallelSpec(r, N, <rank 0's address>, <a free port there>))`, each asking for
        `num_cpus` / `num_gpus` (on GPU `gpus.gpus[r]` of the run's GPU pool, with `gpus`); return their handles
        in rank order once all are built (they meet while being built)."""
        return self._spawn_ranks(WorkerSpec(cls, args, kwargs, name, num_cpus, num_gpus, gpus), rank_kwargs)

    def _spawn(self, spec: WorkerSpec) -> Any:
        """`spawn`'s worker, started by the backend."""

    def _spawn_ranks(self, spec: WorkerSpec, rank_kwargs: Sequence[Mapping[str, Any]]) -> list[Any]:
        """`spawn_ranks`' ranks, started by the backend."""

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call `method` on the worker; await the result. An argument may be another call's
        un-awaited result: it is resolved where the worker runs (no round trip through the driver)."""

    def remote_method(self, handle: Any, method: str) -> Any:
        """A picklable callable `f(*args) -> awaitable` that other workers can call."""

    def kill(self, handle: Any) -> None:
        """Stop one worker now (a Ray actor's process is killed, freeing its threads)."""

    def shutdown(self) -> None:
        """Stop every worker."""

    def on_each_node(self, cls: type, method: str, *args: Any) -> dict[str, Any]:
        """Build `cls()` once on every node that can host a worker, call `method(*args)` there and return each
        result by a label naming the node (node id, host name, address); the objects are gone afterwards."""

    def cpu_capacity(self) -> CpuCapacity | None:
        """What Ray can hand out; None in-process, where CPU requests mean nothing."""


@dataclass(frozen=True)
class WorkerSpec:
    """A worker to start: `cls(*args, **kwargs)`, named `name` (for logs and errors), asking Ray for `num_cpus`
    and `num_gpus`; with `gpus`, on those GPUs of the run's GPU pool."""

    cls: type
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    num_cpus: float
    num_gpus: float
    gpus: GpuSlots | None
