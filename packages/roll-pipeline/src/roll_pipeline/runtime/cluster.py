"""Where workers live: Ray actors (local Ray by default, or an existing cluster) or this process.

Workers are plain classes. `RayCluster.spawn` wraps one with `ray.remote` at the call site;
`LocalCluster.spawn` just instantiates it, so the same pipeline runs without Ray for local debugging
and on machines where Ray is not installed. Either way `call(handle, method, *args)` returns an
awaitable of the method's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import Awaitable
from typing import Any, Protocol


class Cluster(Protocol):
    """The operations the pipeline needs from a worker placement backend."""

    def spawn(
        self, cls: type, *args: Any, name: str, num_cpus: float = 0, num_gpus: float = 0, **kwargs: Any
    ) -> Any:
        """Create a worker of `cls`; return a handle."""
        ...

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call `method` on the worker; await the result. An argument may be another call's
        un-awaited result: it is resolved where the worker runs (no round trip through the driver)."""
        ...

    def remote_method(self, handle: Any, method: str) -> Any:
        """A picklable callable `f(*args) -> awaitable` that other workers can call."""
        ...

    def kill(self, handle: Any) -> None:
        """Stop one worker now (a Ray actor's process is killed, freeing its threads)."""
        ...

    def shutdown(self) -> None:
        """Stop every worker."""
        ...


class LocalCluster:
    """Workers are objects in this process; sync methods run in a thread so the event loop stays free."""

    def __init__(self) -> None:
        self._workers: list[Any] = []

    def spawn(
        self, cls: type, *args: Any, name: str, num_cpus: float = 0, num_gpus: float = 0, **kwargs: Any
    ) -> Any:
        """Instantiate `cls` here."""
        worker = cls(*args, **kwargs)
        self._workers.append(worker)
        return worker

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Await the method (coroutine methods directly, others in a worker thread).

        Awaitable arguments (results of other `call`s) are awaited first, as Ray resolves ObjectRefs.
        """
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


def _close(worker: Any) -> None:
    close = getattr(worker, "close", None)
    if callable(close):
        close()


class _LocalMethod:
    def __init__(self, cluster: LocalCluster, handle: Any, method: str) -> None:
        self._cluster, self._handle, self._method = cluster, handle, method

    def __call__(self, *args: Any) -> Awaitable[Any]:
        return self._cluster.call(self._handle, self._method, *args)


class RayCluster:
    """Workers are Ray actors; `address=None` starts a local Ray instance without the dashboard."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        disable_uv_runtime_env()  # read when ray is first imported
        import ray

        self._ray = ray
        self._actors: list[Any] = []
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if address is None:
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
                # Workers inherit the driver's import path so `roll_*` packages resolve in actors.
                kwargs["runtime_env"] = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
            ray.init(address=address, **kwargs)

    def spawn(
        self, cls: type, *args: Any, name: str, num_cpus: float = 0, num_gpus: float = 0, **kwargs: Any
    ) -> Any:
        """Start an actor of `cls` (named for logs), asking for the given resources.

        Actors without GPUs are spread over the cluster's nodes (Ray would otherwise pack every
        zero-resource actor on the driver's node); GPU actors go where their GPUs are."""
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        if not num_gpus:
            options["scheduling_strategy"] = "SPREAD"
        actor_cls = self._ray.remote(cls).options(**options)
        actor = actor_cls.remote(*args, **kwargs)
        self._actors.append(actor)
        return actor

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """An ObjectRef is awaitable."""
        return getattr(handle, method).remote(*args, **kwargs)

    def remote_method(self, handle: Any, method: str) -> Any:
        """A picklable callable other actors use to call `method` on `handle`."""
        return _RayMethod(handle, method)

    def kill(self, handle: Any) -> None:
        """Kill the actor's process."""
        self._actors = [a for a in self._actors if a is not handle]
        with contextlib.suppress(Exception):
            self._ray.kill(handle)

    def shutdown(self) -> None:
        """Kill every actor this cluster started (Ray itself stays up for reuse)."""
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        self._actors.clear()


class _RayMethod:
    def __init__(self, handle: Any, method: str) -> None:
        self._handle, self._method = handle, method

    def __call__(self, *args: Any) -> Any:
        return getattr(self._handle, self._method).remote(*args)


def disable_uv_runtime_env() -> None:
    """Keep Ray workers on this interpreter and environment.

    Under `uv run`, Ray would otherwise package the working folder and build a fresh environment per
    worker with `uv run` (slow, and a second copy of every dependency).
    """
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def make_cluster(backend: str, address: str | None = None, num_cpus: int | None = None) -> Cluster:
    """The cluster for `ClusterConfig.backend`."""
    if backend == "local":
        return LocalCluster()
    if backend == "ray":
        return RayCluster(address=address, num_cpus=num_cpus)
    raise ValueError(f"unknown cluster backend {backend!r}; expected 'ray' or 'local'")
