"""The driver's side of a rollout: `scheduler.py` (`RolloutScheduler`: group episodes on idle layout
groups, `get_batch(n)` of whole groups), `settings.py` (`SchedulerSettings`), `pool.py` (`WorkerPool`: the
links to the env workers, ordered sends, long polls, restarts), `groups.py` (group episodes, the ledger of
every dispatched episode, `RolloutBatch`, `WorkerLink`), `group_queue.py` (complete groups waiting for
`get_batch`), `demand.py` (`Demand`: the groups a batch needs and what the refill aims at), `backups.py`
(backup episodes of slow env calls, and which attempt at a place is kept), `rollout_metrics.py` (the
`rollout/*` metrics)."""
