"""Which transport a run's weight syncs take, from the train and inference roles' plans (no CUDA needed: the
choice reads the plans only), and how `RankGroup` passes it to the ranks: the CPU path calls them as it always
did, a GPU transport reaches rank 0 alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.gpu_pool import GpuPool, GpuSlots
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.runtime.workers import RolePlan
from roll_pipeline.trainer.weight_update import WeightUpdater, pick_transport
from roll_strategies import ActorTrainWorker, OptimizerSettings
from roll_strategies.sync.transport import Transport

POOL = GpuPool((0, 1), (1.0, 1.0))


def plan(
    device: str,
    *,
    ranks: int = 1,
    rank_devices: tuple[str, ...] = (),
    gpus: tuple[int, ...] = (),
    strategy: str = "hf_infer",
) -> RolePlan:
    return RolePlan(
        device=device,
        num_gpus=0.5 if gpus else 0.0,
        ranks=ranks,
        rank_devices=rank_devices or (device,) * ranks,
        num_cpus=1.0,
        num_threads=None,
        dtype="bfloat16",
        strategy={"strategy_name": strategy, "strategy_config": {}, "share_prefix": False},
        gpus=GpuSlots(POOL, gpus) if gpus else None,
    )


def test_any_cpu_end_takes_the_cpu_path():
    for backend in ("local", "ray"):
        assert pick_transport(backend, plan("cpu"), plan("cpu")).transport is Transport.CPU
    assert pick_transport("local", plan("cuda:0"), plan("cpu")).transport is Transport.CPU
    assert pick_transport("local", plan("cpu"), plan("cuda:0")).transport is Transport.CPU
    assert pick_transport("ray", plan("cuda", gpus=(0,)), plan("cpu")).transport is Transport.CPU


def test_one_process_on_cuda_copies_on_the_device():
    choice = pick_transport("local", plan("cuda:0"), plan("cuda:0"))
    assert choice.transport is Transport.CUDA_COPY
    assert str(choice).startswith("cuda_copy (")
    # one process reaches every GPU it sees: a peer copy
    assert pick_transport("local", plan("cuda:0"), plan("cuda:1")).transport is Transport.CUDA_COPY


def test_ray_actors_on_one_gpu_share_its_memory():
    choice = pick_transport("ray", plan("cuda", gpus=(0,)), plan("cuda", gpus=(0,)))
    assert choice.transport is Transport.CUDA_IPC
    # rank 0 of two data-parallel ranks sits on the server's GPU
    train = plan("cuda", ranks=2, gpus=(1, 0))
    assert pick_transport("ray", train, plan("cuda", gpus=(1,))).transport is Transport.CUDA_IPC


def test_local_rank_processes_on_the_servers_gpu_share_its_memory():
    train = plan("cuda:0", ranks=2, rank_devices=("cuda:0", "cuda:1"))
    assert pick_transport("local", train, plan("cuda:0")).transport is Transport.CUDA_IPC


@pytest.mark.parametrize(
    ("backend", "train", "infer"),
    [
        ("ray", plan("cuda", gpus=(0,)), plan("cuda", gpus=(1,))),
        ("ray", plan("cuda", ranks=2, gpus=(0, 1)), plan("cuda", gpus=(1,))),
        ("ray", plan("cuda", gpus=(0,)), plan("cuda", gpus=(0, 1))),  # a server on two GPUs
        ("local", plan("cuda:1", ranks=2, rank_devices=("cuda:1", "cuda:0")), plan("cuda:0")),
    ],
)
def test_different_gpus_fall_back_to_the_cpu_and_say_why(backend, train, infer):
    choice = pick_transport(backend, train, infer)
    assert choice.transport is Transport.CPU
    assert "nccl" in choice.reason and "process group" in choice.reason


def test_vllm_and_a_pool_without_gpus_stay_on_the_cpu():
    vllm = plan("cuda", gpus=(0,), strategy="vllm")
    choice = pick_transport("ray", plan("cuda", gpus=(0,), strategy="hf_train"), vllm)
    assert choice.transport is Transport.CPU and "vllm" in choice.reason
    assert pick_transport("local", plan("cuda:0"), plan("cuda:0", strategy="vllm")).transport is Transport.CPU
    no_share = plan("cuda")  # num_gpus_per_worker 0: Ray places it on no pool GPU
    assert pick_transport("ray", no_share, plan("cuda", gpus=(0,))).transport is Transport.CPU


class Rank:
    """Records the keyword arguments of each `weight_sync_plan` call."""

    def __init__(self, rank: int) -> None:
        self.rank, self.calls = rank, []

    def weight_sync_plan(self, version, **kwargs):
        self.calls.append(kwargs)
        return ("plan", version, self.rank)


@pytest.mark.parametrize("gathers", [False, True])
def test_the_cpu_path_calls_the_ranks_without_a_transport(gathers):
    ranks = [Rank(0), Rank(1)]
    group = RankGroup(LocalCluster(), ranks, gathers_weights=gathers)
    asyncio.run(group.weight_sync_plan(3, dtype="float32", bucket_bytes=10, transport="cpu"))
    called = [r for r in ranks if r.calls]
    assert [r.rank for r in called] == ([0, 1] if gathers else [0])
    assert all(c == {"dtype": "float32", "bucket_bytes": 10} for r in called for c in r.calls)


@pytest.mark.parametrize("gathers", [False, True])
def test_a_gpu_transport_reaches_rank_zero_alone(gathers):
    ranks = [Rank(0), Rank(1)]
    group = RankGroup(LocalCluster(), ranks, gathers_weights=gathers)
    got = asyncio.run(group.weight_sync_plan(3, dtype="float32", bucket_bytes=10, transport="cuda_ipc"))
    assert got == ("plan", 3, 0)
    assert ranks[0].calls == [{"dtype": "float32", "bucket_bytes": 10, "transport": "cuda_ipc"}]
    assert ranks[1].calls == ([{"dtype": "float32", "bucket_bytes": 10}] if gathers else [])


def test_the_updater_defaults_to_the_cpu_path():
    updater = WeightUpdater(LocalCluster(), RankGroup(LocalCluster(), [Rank(0)]), object(), dtype="float32")
    assert updater.transport is Transport.CPU


def test_a_gpu_transport_goes_through_the_workers_to_the_server(model_dir: Path):
    """The non-CPU plan path end to end on CPU tensors (a GPU transport packs where the weights are): the
    worker takes `transport`, the plan carries it, and the server then holds the trainer's weights."""
    cluster = LocalCluster()
    train = ActorTrainWorker(model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    server = PolicyServer(model_dir, seed=1)
    ids = torch.randint(8, 200, (4, 12), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    train.train_step([batch], lambda lp, ent, mb: (-lp[:, 1:].mean(), {}), with_entropy=False)
    source = RankGroup(cluster, [train])
    plan = asyncio.run(
        source.weight_sync_plan(1, dtype="float32", bucket_bytes=30_000, transport="cuda_copy")
    )
    assert plan.transport == "cuda_copy"
    update = WeightUpdater(
        cluster, source, server, dtype="float32", bucket_bytes=30_000, transport="cuda_copy"
    )
    metrics = asyncio.run(update(1))
    assert metrics["weight_sync/buckets"] > 1 and metrics["weight_sync/version"] == 1
    assert server.weights_fingerprint() == train.weights_fingerprint()
