"""Weight-sync transports: the CPU path on the CPU, GPU to GPU (device copy, CUDA IPC, NCCL) when both ends are on
CUDA. The gpu tests skip without CUDA; the broadcast channel's logic also runs on the CPU (gloo)."""

from __future__ import annotations

import dataclasses
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from roll_strategies import HFInferStrategy, HFTrainStrategy, WeightSyncError, sync_weights
from roll_strategies.sync.broadcast import BroadcastChannel
from roll_strategies.sync.transport import Transport, device_of, select_transport
from roll_strategies.sync.weight_sync import WeightBucket, WeightExporter
from roll_strategies.sync.weights import unique_named_tensors

RANKS = Path(__file__).with_name("transport_ranks.py")


def _model(seed: int, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(seed)  # the same model as transport_ranks.small_model
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)).to(device)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("source", "sinks", "same_process", "expected"),
    [
        ("cpu", ["cpu"], True, Transport.CPU),
        ("cuda:0", ["cpu"], True, Transport.CPU),
        ("cpu", ["cuda:0"], False, Transport.CPU),
        ("cuda:0", ["cuda:0", "cpu"], True, Transport.CPU),
        ("cuda:0", ["cuda:0"], True, Transport.CUDA_COPY),
        ("cuda:0", ["cuda:1"], True, Transport.CUDA_COPY),
        ("cuda:0", ["cuda:0"], False, Transport.CUDA_IPC),
        ("cuda:0", ["cuda:1"], False, Transport.NCCL),
    ],
)
def test_select_transport_is_the_cpu_path_unless_every_end_is_on_cuda(source, sinks, same_process, expected):
    assert select_transport(source, sinks, same_process=same_process) is expected


def test_same_gpu_overrides_the_device_indices_of_separate_processes():
    assert select_transport("cuda:0", ["cuda:0"], same_process=False, same_gpu=False) is Transport.NCCL
    assert select_transport("cuda:0", ["cuda:1"], same_process=False, same_gpu=True) is Transport.CUDA_IPC


def test_device_of_reads_the_device_attribute_and_defaults_to_the_cpu():
    class End:
        device = torch.device("cuda", 1)

    assert device_of(End()) == torch.device("cuda", 1)
    assert device_of(object()) == torch.device("cpu")


def test_sync_weights_on_the_cpu_takes_the_cpu_path(tiny_model_dir, monkeypatch):
    train = HFTrainStrategy(tiny_model_dir)
    infer = HFInferStrategy(tiny_model_dir, seed=1)
    plans, buckets = [], []
    make_plan, receive = train.weight_sync_plan, infer.receive_weight_bucket

    def recorded_plan(*args, **kwargs):
        plans.append(kwargs)
        return make_plan(*args, **kwargs)

    def recorded_receive(bucket):
        buckets.append(bucket)
        return receive(bucket)

    monkeypatch.setattr(train, "weight_sync_plan", recorded_plan)
    monkeypatch.setattr(infer, "receive_weight_bucket", recorded_receive)
    sync_weights(train, infer, version=1, dtype="float32", force=True)
    assert plans == [{"dtype": "float32", "bucket_bytes": 64 << 20}]  # the call every source takes
    assert buckets and all(b.transport == "cpu" and b.data.device.type == "cpu" for b in buckets)
    assert buckets[0].plan is not None and buckets[0].plan.transport == "cpu"
    assert infer.policy_version == 1


def test_a_cpu_bucket_marked_for_ipc_pickles_its_bytes():
    bucket = WeightBucket(1, "f", 0, 1, (), torch.arange(4.0), transport=Transport.CUDA_IPC.value)
    assert torch.equal(pickle.loads(pickle.dumps(bucket)).data, torch.arange(4.0))


def test_broadcast_channel_refuses_a_bucket_with_data():
    model = _model(0)
    exporter = WeightExporter(model)
    plan = exporter.plan(1, dtype="float32", bucket_bytes=1 << 20)
    with pytest.raises(WeightSyncError, match="header"):
        BroadcastChannel(src=0, device="cpu").receive(exporter.bucket(plan, 0))


def _run_broadcast(tmp_path, backend: str, transport: str) -> dict[str, torch.Tensor]:
    port = str(_free_port())
    ranks = [
        subprocess.Popen(
            [sys.executable, str(RANKS), "broadcast", str(r), port, backend, transport, str(tmp_path)]
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=900) for p in ranks] == [0, 0]
    return torch.load(tmp_path / "received.pt")


@pytest.mark.slow
def test_broadcast_channel_moves_every_bucket_between_processes_on_the_cpu(tmp_path):
    received = _run_broadcast(tmp_path, "gloo", Transport.CPU.value)
    expected = _model(seed=0).state_dict()
    assert all(torch.equal(received[n], expected[n]) for n in expected)


# ----------------------------------------------------------------- GPU paths (skipped without CUDA)
@pytest.mark.gpu
def test_in_process_sync_on_one_gpu_copies_device_to_device(tiny_model_dir, monkeypatch):
    train = HFTrainStrategy(tiny_model_dir, device="cuda", dtype="bfloat16")
    infer = HFInferStrategy(tiny_model_dir, device="cuda", dtype="bfloat16", seed=1)
    buckets = []
    receive = infer.receive_weight_bucket
    monkeypatch.setattr(infer, "receive_weight_bucket", lambda b: buckets.append(b) or receive(b))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: pytest.fail("a bucket went through the host"))
    sync_weights(train, infer, version=1, dtype="bfloat16", force=True)
    monkeypatch.undo()
    assert buckets and all(b.transport == "cuda_copy" and b.data.is_cuda for b in buckets)
    sent = train.exporter.tensors()
    held = unique_named_tensors(infer.model)
    assert all(torch.equal(held[n], sent[n].to(torch.bfloat16)) for n in sent)
    assert infer.policy_version == 1


@pytest.mark.gpu
def test_cuda_ipc_sends_a_handle_between_processes_on_one_gpu(tmp_path):
    model = _model(seed=0, device="cuda")
    exporter = WeightExporter(model)
    plan = exporter.plan(1, dtype="float32", bucket_bytes=256, transport=Transport.CUDA_IPC.value)
    buckets = [exporter.bucket(plan, i) for i in range(plan.num_buckets)]  # alive until the child is done
    for index, bucket in enumerate(buckets):
        (tmp_path / f"bucket_{index:04d}.pkl").write_bytes(pickle.dumps(bucket))
    subprocess.run([sys.executable, str(RANKS), "ipc", str(tmp_path)], check=True, timeout=300)
    received = torch.load(tmp_path / "received.pt")
    expected = {n: t.cpu() for n, t in model.state_dict().items()}
    assert all(torch.equal(received[n], expected[n]) for n in expected)


@pytest.mark.gpu
def test_an_ipc_bucket_pickles_a_handle_not_its_bytes():
    data = torch.ones(1 << 18, device="cuda")  # 1 MiB
    bucket = WeightBucket(1, "f", 0, 1, (), data, transport=Transport.CUDA_IPC.value)
    assert len(pickle.dumps(bucket)) < 16 << 10
    assert len(pickle.dumps(dataclasses.replace(bucket, transport="cpu"))) > 1 << 20


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_nccl_broadcast_moves_every_bucket_across_gpus(tmp_path):
    received = _run_broadcast(tmp_path, "nccl", Transport.NCCL.value)
    expected = _model(seed=0).state_dict()
    assert all(torch.equal(received[n], expected[n]) for n in expected)
