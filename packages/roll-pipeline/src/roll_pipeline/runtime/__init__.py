"""Where the roles run: `cluster.py` (Ray actors or in-process objects: `local_cluster.py`; the `Cluster` both are:
`cluster_base.py`), `placement.py` (planning the roles:
each one's backend, ranks, devices, CPU request, threads and model folder, one `RolePlan` each), `gpu_pool.py` (the run's GPUs under Ray: a whole-GPU bundle per
device_mapping index), `workers.py` (`RolePlan`, `RoleSpawner`: a role's workers from its plan),
`ranks.py` (`RankGroup`: a role's data-parallel ranks called as one), `rank_processes.py` (in-process mode: each
rank in a child process), `storage.py` (every node sees the run folder and the model), `rollout.py` (the rollout
schedulers and their env workers), `policy_server.py` (the inference strategy behind a request batcher),
`infer_sleep.py` (a colocated vLLM engine asleep while the trainer runs), `trainer_offload.py` (colocated trained roles'
state in CPU memory while the engine samples)."""
