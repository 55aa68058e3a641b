"""The other processes of `test_weight_transport.py`, run as scripts:

- `python transport_ranks.py broadcast RANK PORT BACKEND TRANSPORT DIR`: rank 0 sends a small model's weights by
  `BroadcastChannel` (headers first, to DIR/headers.pt), rank 1 receives them (its state dict to DIR/received.pt).
- `python transport_ranks.py ipc DIR`: reads the pickled buckets DIR/bucket_*.pkl (CUDA IPC handles of the
  parent's memory), applies them to a model of its own on the GPU, writes its state dict to DIR/received.pt.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import torch
from roll_strategies.sync.broadcast import BroadcastChannel
from roll_strategies.sync.weight_receiver import WeightReceiver
from roll_strategies.sync.weight_sync import WeightBucket, WeightExporter
from roll_strategies.sync.weights import load_named_weights, tensor_shape, unique_named_tensors


def small_model(seed: int, device: str = "cpu") -> torch.nn.Module:
    """Two linear layers, seeded."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)).to(device)


def receiver_of(model: torch.nn.Module) -> WeightReceiver:
    """A `WeightReceiver` loading into `model`."""
    shapes = {n: tensor_shape(t) for n, t in unique_named_tensors(model).items()}
    return WeightReceiver(shapes, lambda tensors: load_named_weights(model, tensors))


def broadcast(rank: int, port: int, backend: str, transport: str, folder: Path) -> None:
    """Rank `rank` of a 2-process group: 0 sends, 1 receives."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=2)
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    channel = BroadcastChannel(src=0, device=device)
    model = small_model(seed=rank, device=device)
    if rank == 0:
        exporter = WeightExporter(model)
        plan = exporter.plan(1, dtype="float32", bucket_bytes=256, transport=transport)
        buckets = [exporter.bucket(plan, i) for i in range(plan.num_buckets)]
        torch.save([channel.header(b) for b in buckets], folder / "headers.pt")
        dist.barrier()  # the headers travel by file here (by a Ray call in a run)
        for bucket in buckets:
            channel.send(bucket)
    else:
        dist.barrier()
        receiver = receiver_of(model)
        headers: list[WeightBucket] = torch.load(folder / "headers.pt", weights_only=False)
        for header in headers:
            receiver.receive(channel.receive(header))
        torch.save({n: t.cpu() for n, t in model.state_dict().items()}, folder / "received.pt")
    dist.destroy_process_group()


def ipc(folder: Path) -> None:
    """Receive the pickled IPC buckets of `folder` into a model on this process's GPU."""
    model = small_model(seed=5, device="cuda")
    receiver = receiver_of(model)
    for path in sorted(folder.glob("bucket_*.pkl")):
        bucket = pickle.loads(
            path.read_bytes()
        )  # what a Ray call unpickles: the sender's memory, opened here
        if not bucket.data.is_cuda:
            raise SystemExit(f"Expected a CUDA bucket from {path}, got one on {bucket.data.device}")
        receiver.receive(bucket)
        del bucket
    torch.save({n: t.cpu() for n, t in model.state_dict().items()}, folder / "received.pt")


if __name__ == "__main__":
    if sys.argv[1] == "broadcast":
        rank, port, backend, transport, out = sys.argv[2:7]
        broadcast(int(rank), int(port), backend, transport, Path(out))
    else:
        ipc(Path(sys.argv[2]))
