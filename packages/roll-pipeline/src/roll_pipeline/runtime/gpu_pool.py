"""The run's GPUs under Ray: one placement group of whole-GPU bundles, and where each worker sits in it.

Every distinct `device_mapping` index of the roles is one bundle `{"GPU": 1, "CPU": c}` of one run-wide
placement group, created once per run (`PACK`: on as few nodes as hold the bundles; a pool larger than a node
spans nodes, each bundle whole on one node). Rank i of a role runs in the bundle of its `device_mapping[i]` and
asks for a share of that bundle's GPU, so the rank i of two colocated roles share one GPU and two ranks of one
role never do. A worker on several GPUs (actor_infer on `[2, 3]`, tensor-parallel) runs in the bundle of its
first GPU and sees the GPUs of all its bundles: Ray gives an actor GPUs of one bundle only, so the pool sets the
worker's `CUDA_VISIBLE_DEVICES` itself (and tells Ray to leave it); those bundles must be on one node.

Indices name the run's GPUs, not physical devices: Ray picks which GPU backs each bundle (the probe at creation
reads it), so `[0, 1]` and `[4, 5]` alone both mean "two GPUs". Data-parallel ranks outside the pool (on
the CPU) get a placement group of their own (`rank_group`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MIN_BUNDLE_CPUS",
    "MIN_RANK_CPUS",
    "GpuPool",
    "GpuSlots",
    "PoolError",
    "RayGpuPool",
    "plan_gpu_pool",
    "rank_group",
]

MIN_BUNDLE_CPUS = 0.01
"""The CPUs of a bundle whose workers ask for none (a placement group bundle cannot be without CPU)."""

MIN_RANK_CPUS = 0.01
"""The CPU bundle of a rank whose plan asks for none (a placement group bundle cannot be empty)."""


class PoolError(RuntimeError):
    """Ray cannot hold the pool (the cluster reports it as a `ClusterError`)."""


@dataclass(frozen=True)
class GpuPool:
    """The run's GPU bundles: one per distinct `device_mapping` index."""

    gpus: tuple[int, ...]
    """The indices, ascending: bundle b is GPU `gpus[b]`."""
    cpus: tuple[float, ...]
    """CPUs of each bundle: what the workers placed there ask for together."""

    def bundle_of(self, gpu: int) -> int:
        """The bundle index of GPU `gpu`."""
        return self.gpus.index(gpu)


@dataclass(frozen=True)
class GpuSlots:
    """Where one role's workers go in the pool."""

    pool: GpuPool
    gpus: tuple[int, ...]
    """One worker: all its GPUs (it runs in the first one's bundle); data-parallel ranks: rank r's GPU is
    `gpus[r]`."""


def plan_gpu_pool(workers: Iterable[tuple[tuple[int, ...], float]]) -> GpuPool:
    """The pool of workers given as (their GPUs, their CPU request): each worker's CPUs go to the bundle of its
    first GPU, where it runs."""
    cpus: dict[int, float] = defaultdict(float)
    for gpus, worker_cpus in workers:
        for gpu in gpus:
            cpus[gpu] += 0.0
        cpus[gpus[0]] += worker_cpus
    order = tuple(sorted(cpus))
    return GpuPool(order, tuple(max(cpus[g], MIN_BUNDLE_CPUS) for g in order))


class RayGpuPool:
    """A `GpuPool` held by Ray: the placement group, and the node and GPU id behind each bundle."""

    def __init__(self, ray: Any, pool: GpuPool, timeout_s: float, can_grow: bool) -> None:
        from ray.util.placement_group import placement_group, remove_placement_group

        self._ray, self.pool = ray, pool
        size = len(pool.gpus)
        total = ray.cluster_resources().get("GPU", 0.0)
        if not can_grow and total < size:
            raise PoolError(
                f"the roles' device_mapping GPUs {list(pool.gpus)} are {size} GPUs, but this Ray instance has"
                f" {total:g}. Fix: map the roles onto at most {total:g} GPU indices (colocate roles on the same"
                " indices), or run on a machine or cluster with more GPUs."
            )
        bundles = [{"GPU": 1.0, "CPU": cpus} for cpus in pool.cpus]
        self.group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(self.group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            remove_placement_group(self.group)
            raise PoolError(
                f"Ray could not reserve the GPU pool of device_mapping GPUs {list(pool.gpus)} ({size} bundles of"
                f" 1 GPU, CPUs {list(pool.cpus)}) in {timeout_s:.0f} s; the cluster has"
                f" {ray.available_resources()} free. Fix: free or add GPUs, map the roles onto fewer GPU indices,"
                " or lower the roles' num_threads."
            ) from exc
        probe = ray.remote(num_cpus=0, num_gpus=1e-4)(_bundle_gpu)
        self.where: list[tuple[str, str]] = ray.get(
            [probe.options(scheduling_strategy=self.in_bundle(g)).remote() for g in pool.gpus]
        )
        """(node id, physical GPU id) behind each bundle."""

    def in_bundle(self, gpu: int) -> Any:
        """The scheduling strategy of an actor or task in GPU `gpu`'s bundle."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            self.group, placement_group_bundle_index=self.pool.bundle_of(gpu)
        )

    def options(self, gpus: tuple[int, ...], num_gpus: float, name: str) -> dict[str, Any]:
        """Ray options of one worker on `gpus` asking for `num_gpus` in all: a share of each GPU, requested in
        the first GPU's bundle; a worker on several GPUs sees them all through `CUDA_VISIBLE_DEVICES`."""
        options: dict[str, Any] = {
            "num_gpus": min(num_gpus / len(gpus), 1.0),
            "scheduling_strategy": self.in_bundle(gpus[0]),
        }
        if len(gpus) > 1:
            where = [self.where[self.pool.bundle_of(g)] for g in gpus]
            if len({node for node, _ in where}) > 1:
                raise PoolError(
                    f"{name} runs one worker on device_mapping GPUs {list(gpus)}, but Ray placed them on"
                    f" {len({node for node, _ in where})} nodes (one process sees one node's GPUs). Fix: map it onto"
                    " at most one node's GPUs, or give the nodes more GPUs each."
                )
            options["runtime_env"] = {
                "env_vars": {
                    "CUDA_VISIBLE_DEVICES": ",".join(gpu_id for _, gpu_id in where),
                    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                }
            }
        return options

    def remove(self) -> None:
        """Give the bundles back to Ray."""
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self.group)


def rank_group(
    ray: Any, size: int, num_cpus: float, num_gpus: float, timeout_s: float
) -> tuple[Any, list[dict[str, Any]]]:
    """Outside the GPU pool (the CPU, `num_gpus_per_worker` without a mapping): a placement group of `size`
    bundles, one per rank, packed on as few nodes as fit; the group and each rank's Ray options."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cpus = num_cpus or MIN_RANK_CPUS  # a bundle cannot be empty
    bundle = {"CPU": cpus, **({"GPU": num_gpus} if num_gpus else {})}
    group = placement_group([bundle] * size, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as exc:
        remove_placement_group(group)
        raise PoolError(
            f"Ray could not place its {size} ranks ({bundle} each) in {timeout_s:.0f} s;"
            f" the cluster has {ray.available_resources()} free. Fix: fewer ranks (world_size, or"
            " fewer device_mapping GPUs), lower num_threads / num_gpus_per_worker, or add nodes."
        ) from exc
    options = [
        {
            "num_cpus": cpus,
            "num_gpus": num_gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
        }
        for rank in range(size)
    ]
    return group, options


def _bundle_gpu() -> tuple[str, str]:
    """The node and the physical GPU id of the bundle this runs in."""
    import ray

    return ray.get_runtime_context().get_node_id(), str(ray.get_gpu_ids()[0])
