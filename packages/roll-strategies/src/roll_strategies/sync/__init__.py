"""Weight sync from a train strategy to inference strategies: versioned, bucketed, refused when stale or partial.

- `weight_sync.py`: the sending side and the protocol: `WeightSyncPlan`, `WeightBucket`, `WeightExporter`, `sync_weights`.
- `weight_receiver.py`: `WeightReceiver`, the receiving side: stages buckets, applies only complete updates in order.
- `weights.py`: named-tensor export and strict load of a model's weights, tied weights once.
- `endpoints.py`: the sync methods of the backends (through their receiver or exporter), written once.
- `transport.py`: how buckets travel: CPU memory, or GPU to GPU (device copy, CUDA IPC, NCCL broadcast).
- `broadcast.py`: `BroadcastChannel`, the NCCL transport's data path (a bucket's data by `torch.distributed.broadcast`).
"""
