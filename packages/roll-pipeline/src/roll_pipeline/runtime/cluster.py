"""Where workers live: Ray actors (local Ray by default, or an existing cluster) or this process.

Workers are plain classes. `RayCluster.spawn` wraps one with `ray.remote` at the call site;
`LocalCluster.spawn` (`local_cluster.py`) just instantiates it, so the same pipeline runs without Ray for local
debugging and on machines where Ray is not installed (Ray is the `roll-pipeline[ray]` extra). Either way
`call(handle, method, *args)` returns an awaitable of the method's result; `spawn_ranks` starts the N
data-parallel ranks of a trained role, which meet in one torch.distributed group (Ray actors placed
together, or child processes in-process: a process holds one group); `on_each_node` runs one call on every
node that can host a worker (the storage check), and `cpu_capacity` says how many CPUs Ray can hand out (the
CPU plan of `placement.plan_cpus`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from roll_pipeline.runtime.cluster_base import Cluster, CpuCapacity, WorkerSpec
from roll_pipeline.runtime.gpu_pool import GpuSlots, PoolError, RayGpuPool, rank_group
from roll_pipeline.runtime.local_cluster import LocalCluster

MISSING_RAY = (
    "cluster.backend='ray' needs Ray, which this environment lacks: install the extra with "
    "`pip install 'roll-pipeline[ray]'` (in the roll workspace `uv sync` installs it with the dev group), or "
    "set cluster.backend=local to run every worker in this process"
)
"""The one message for a run under Ray without Ray installed (preflight and `RayCluster` both say it)."""


class ClusterError(RuntimeError):
    """The cluster cannot host the run: Ray missing, storage the nodes do not share, CPU requests that do not
    fit. The message names the node or the setting and the fix."""


def ray_installed() -> bool:
    """Whether Ray can be imported here (no import: a `find_spec` only)."""
    return importlib.util.find_spec("ray") is not None


class RayCluster(Cluster):
    """Workers are Ray actors; `address=None` starts a local Ray instance without the dashboard."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        disable_uv_runtime_env()  # read when ray is first imported
        try:
            import ray
        except ImportError as exc:
            raise ClusterError(MISSING_RAY) from exc

        self._ray = ray
        self._actors: list[Any] = []
        self._groups: list[Any] = []  # placement groups of the data-parallel ranks
        self._pool: RayGpuPool | None = None  # the run's GPU bundles, reserved by the first worker on them
        self.placement_timeout_s = PLACEMENT_TIMEOUT_S
        # a local instance started here never grows; an existing one (an address, or Ray already up) may
        self._can_grow = address is not None or ray.is_initialized()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if address is None:
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
                # Workers inherit the driver's import path so `roll_*` packages resolve in actors.
                kwargs["runtime_env"] = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
            ray.init(address=address, **kwargs)

    def _spawn(self, spec: WorkerSpec) -> Any:
        """Start an actor of `cls` (named for logs), asking for the given resources.

        Actors without GPUs are spread over the cluster's nodes (Ray would otherwise pack every
        zero-resource actor on the driver's node); GPU actors go where their GPUs are: with `gpus`, in the
        bundles of the run's GPU pool (`gpu_pool`)."""
        options: dict[str, Any] = {"num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus}
        if spec.gpus is not None:
            options.update(self._pool_options(spec.gpus, spec.gpus.gpus, spec))
        elif not spec.num_gpus:
            options["scheduling_strategy"] = "SPREAD"
        actor = self._ray.remote(spec.cls).options(**options).remote(*spec.args, **spec.kwargs)
        self._actors.append(actor)
        return actor

    def _spawn_ranks(self, spec: WorkerSpec, rank_kwargs: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The ranks' actors, built in two phases: a task where rank 0 runs reports its node's IP and a free port
        there, then every rank is started with that rendezvous and they meet while being built. With `gpus`, rank
        r runs in the GPU pool's bundle of GPU `gpus.gpus[r]`; without, the ranks get a placement group of their
        own (one bundle each, packed on as few nodes as fit)."""
        from roll_strategies import DataParallelSpec

        size = len(rank_kwargs)
        if spec.gpus is not None:
            each = [self._pool_options(spec.gpus, (gpu,), spec) for gpu in spec.gpus.gpus]
            placed = [{"num_cpus": spec.num_cpus, **options} for options in each]
        else:
            try:
                group, placed = rank_group(self._ray, size, spec.num_cpus, spec.num_gpus, PLACEMENT_TIMEOUT_S)
            except PoolError as exc:
                raise ClusterError(f"{spec.name}: {exc}") from exc
            self._groups.append(group)
        probe = self._ray.remote(num_cpus=0)(node_address).options(
            scheduling_strategy=placed[0]["scheduling_strategy"]
        )
        master_addr, master_port = self._ray.get(probe.remote())
        actor_cls = self._ray.remote(spec.cls)
        ranks = []
        for rank, extra in enumerate(rank_kwargs):
            group_rank = DataParallelSpec(rank, size, master_addr, master_port)
            ranks.append(
                actor_cls.options(**placed[rank]).remote(
                    *spec.args, **spec.kwargs, **extra, data_parallel=group_rank
                )
            )
        self._actors.extend(ranks)
        # actor creation is asynchronous: wait until every rank has joined the group, or raise the first failure
        pending = [actor.__ray_ready__.remote() for actor in ranks]
        while pending:
            done, pending = self._ray.wait(pending, num_returns=1)
            self._ray.get(done)
        return ranks

    def _pool_options(self, slots: GpuSlots, gpus: tuple[int, ...], spec: WorkerSpec) -> dict[str, Any]:
        """Ray options of a worker on `gpus` of the run's GPU pool, reserving the pool on first use."""
        try:
            if self._pool is None:
                self._pool = RayGpuPool(self._ray, slots.pool, self.placement_timeout_s, self._can_grow)
            elif self._pool.pool != slots.pool:
                raise PoolError(
                    f"{spec.name} asks for GPU pool {slots.pool}, but this run reserved {self._pool.pool}: plan every"
                    " role together (runtime.placement.plan_roles) so they share one pool"
                )
            return self._pool.options(gpus, spec.num_gpus, spec.name)
        except PoolError as exc:
            raise ClusterError(f"{spec.name}: {exc}") from exc

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
        from ray.util.placement_group import remove_placement_group

        for group in self._groups:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
        self._groups.clear()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.remove()
            self._pool = None

    def _worker_nodes(self) -> list[dict[str, Any]]:
        """The alive nodes with CPUs: every roll actor asks for some CPU, so only these can host one."""
        return [n for n in self._ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]

    def on_each_node(self, cls: type, method: str, *args: Any, timeout_s: float = 600) -> dict[str, Any]:
        """A zero-CPU actor of `cls` pinned to each node that can host a worker; results by node label.
        `ClusterError` naming the nodes that did not answer within `timeout_s` (an actor process could not
        start there: a node overloaded, out of memory, or unreachable)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = self._worker_nodes()
        labels = [
            f"node {n['NodeID']} (host {n.get('NodeManagerHostname', '?')}, {n.get('NodeManagerAddress', '?')})"
            for n in nodes
        ]
        remote = self._ray.remote(cls)
        actors = [
            remote.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote()
            for n in nodes
        ]
        pending = [getattr(a, method).remote(*args) for a in actors]
        try:
            ready, _ = self._ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
            silent = [label for label, ref in zip(labels, pending, strict=True) if ref not in ready]
            if silent:
                raise ClusterError(
                    f"Expected every node to run {cls.__name__}.{method} within {timeout_s:.0f} s, but "
                    f"{len(silent)} of {len(nodes)} did not answer: {'; '.join(silent)}. An actor process could not"
                    " start there: check the node's load and memory (`ray status`) and that it is reachable."
                )
            results = self._ray.get(pending)
        finally:
            for actor in actors:
                with contextlib.suppress(Exception):
                    self._ray.kill(actor)
        return dict(zip(labels, results, strict=True))

    def cpu_capacity(self) -> CpuCapacity:
        """Free CPUs of the alive nodes together, and the largest node's CPUs."""
        totals = [n["Resources"].get("CPU", 0.0) for n in self._worker_nodes()]
        # Ray's report leaves out a resource of which nothing is free
        available = self._ray.available_resources().get("CPU", 0.0)
        return CpuCapacity(
            float(min(available, sum(totals))), float(max(totals, default=0.0)), self._can_grow
        )


PLACEMENT_TIMEOUT_S = 600.0
"""How long the ranks of a role may wait for Ray to find room for all of them (an autoscaler may add nodes)."""


def node_address() -> tuple[str, int]:
    """This node's IP as Ray knows it and a free TCP port on it: where a rank 0 here can host its group."""
    import ray
    from roll_strategies import free_port

    host = ray.util.get_node_ip_address()
    return host, free_port(host)


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
