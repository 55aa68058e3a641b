"""What a person looks at: `tracking.py` (TensorBoard, metrics.jsonl, console, W&B), `metrics.py` (rollout and
validation metrics), `render.py` (episode GIFs), `report.py` (run header, final report, baselines), `summary.py`
(`RunSummary`: what a run reached), `plotting.py` (`roll plot`'s learning curves), `transcripts.py` (rollout
dumps)."""
