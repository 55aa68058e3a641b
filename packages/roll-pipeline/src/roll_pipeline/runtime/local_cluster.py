"""The in-process cluster (`cluster.backend=local`): workers are objects of this process, the ranks of a trained
role child processes (`rank_processes`); the same `Cluster` calls as Ray's (`runtime.cluster`), without Ray."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from roll_pipeline.runtime.cluster_base import Cluster, WorkerSpec
from roll_pipeline.runtime.rank_processes import RankProcess, spawn_rank_processes

__all__ = ["LocalCluster"]


class LocalCluster(Cluster):
    """Workers are objects in this process; sync methods run in a thread so the event loop stays free."""

    def __init__(self) -> None:
        self._workers: list[Any] = []

    def _spawn(self, spec: WorkerSpec) -> Any:
        """Instantiate `cls` here (in-process there is no GPU pool: the plan names each worker's device)."""
        worker = spec.cls(*spec.args, **spec.kwargs)
        self._workers.append(worker)
        return worker

    def _spawn_ranks(self, spec: WorkerSpec, rank_kwargs: Sequence[Mapping[str, Any]]) -> list[Any]:
        """One child process per rank (`rank_processes`), meeting on a free port of this machine."""
        from roll_strategies import DataParallelSpec, free_port

        size, port = len(rank_kwargs), free_port()
        each = [
            {**spec.kwargs, **extra, "data_parallel": DataParallelSpec(r, size, "127.0.0.1", port)}
            for r, extra in enumerate(rank_kwargs)
        ]
        ranks = spawn_rank_processes(spec.cls, spec.args, each, spec.name)
        self._workers.extend(ranks)
        return ranks

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Await the method (coroutine methods directly, others in a worker thread; a rank's child process
        answers it).

        Awaitable arguments (results of other `call`s) are awaited first, as Ray resolves ObjectRefs.
        """
        if isinstance(handle, RankProcess):
            return handle.call(method, *args, **kwargs)
        return self._call(getattr(handle, method), args, kwargs)

    @staticmethod
    async def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args = tuple([await a if inspect.isawaitable(a) else a for a in args])
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def remote_method(self, handle: Any, method: str) -> Any:
        """The bound method itself (coroutine methods are awaitable when called)."""
        return _LocalMethod(self, handle, method)

    def kill(self, handle: Any) -> None:
        """Close the worker (in-process there is no process to kill: its stuck threads live on)."""
        if any(w is handle for w in self._workers):
            self._workers = [w for w in self._workers if w is not handle]
            _close(handle)

    def shutdown(self) -> None:
        """Close workers that have a `close` method."""
        for worker in self._workers:
            _close(worker)
        self._workers.clear()

    def on_each_node(self, cls: type, method: str, *args: Any) -> dict[str, Any]:
        """One node: this process."""
        return {f"this machine (host {socket.gethostname()})": getattr(cls(), method)(*args)}

    def cpu_capacity(self) -> None:
        """In-process: nothing to hand out."""
        return None


def _close(worker: Any) -> None:
    close = getattr(worker, "close", None)
    if callable(close):
        close()


class _LocalMethod:
    def __init__(self, cluster: LocalCluster, handle: Any, method: str) -> None:
        self._cluster, self._handle, self._method = cluster, handle, method

    def __call__(self, *args: Any) -> Awaitable[Any]:
        return self._cluster.call(self._handle, self._method, *args)
