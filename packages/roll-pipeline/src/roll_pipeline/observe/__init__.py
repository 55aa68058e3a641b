"""What a person looks at: `tracking.py` (TensorBoard, metrics.jsonl, console, W&B), `metrics.py`, `render.py`
(episode GIFs), `report.py` (run header, final report, baselines), `plotting.py`, `transcripts.py` (rollout dumps)."""
