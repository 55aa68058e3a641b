"""Where the roles run: `cluster.py` (Ray actors or in-process objects), `placement.py` (each role's backend,
ranks, devices and worker arguments), `ranks.py` (`RankGroup`: a role's data-parallel ranks called as one),
`rank_processes.py` (in-process mode: each rank in a child process), `rollout.py` (the rollout schedulers and
their env workers), `policy_server.py` (the inference strategy behind a request batcher)."""
