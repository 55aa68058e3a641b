"""Where the roles run: `cluster.py` (Ray actors or in-process objects), `placement.py` (each role's backend,
device and worker arguments), `rollout.py` (the rollout schedulers and their env workers), `policy_server.py`
(the inference strategy behind a request batcher)."""
