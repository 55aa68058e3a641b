"""What survives a crash: `checkpoint.py` (atomic checkpoints with a verified manifest) and `run_state.py`
(what a checkpoint holds, and resuming from it)."""
