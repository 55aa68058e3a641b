from __future__ import annotations

import os
import subprocess
import sys

import torch
from roll_strategies import (
    ActorInferWorker,
    ActorTrainWorker,
    GenerationParams,
    OptimizerSettings,
    ReferenceWorker,
)


def test_workers_delegate(tiny_model_dir):
    threads = torch.get_num_threads()
    try:
        train = ActorTrainWorker(
            tiny_model_dir, num_threads=1, optimizer=OptimizerSettings(learning_rate=1e-3)
        )
        assert torch.get_num_threads() == 1
        infer = ActorInferWorker(tiny_model_dir, seed=3)
        ref = ReferenceWorker(tiny_model_dir)
    finally:
        torch.set_num_threads(threads)
    outs = infer.generate([[2, 10, 11]], GenerationParams(max_new_tokens=4))
    assert len(outs) == 1 and 1 <= len(outs[0].output_ids) <= 4
    infer.update_weights(train.export_weights(), version=5)
    assert infer.get_policy_version() == 5 and train.get_step() == 0
    ids = torch.tensor([[2, 10, 11, 12]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    assert torch.equal(ref.compute_log_probs(batch, 1), train.compute_log_probs(batch, 1))


def test_a_worker_releases_its_process_memory(tiny_model_dir):
    """Once a step the pipeline asks every worker to trim its process's heap (`roll_strategies.workers.allocator`)."""
    report = ReferenceWorker(tiny_model_dir).release_memory()
    assert report.pid == os.getpid() and report.rss_bytes > 0


def test_import_pulls_no_ray_vllm_deepspeed_or_upper_packages():
    code = (
        "import sys, roll_strategies\n"
        "banned = ('ray', 'vllm', 'deepspeed', 'roll_envs', 'roll_rollout', 'roll_pipeline')\n"
        "print([m for m in sys.modules if m.split('.')[0] in banned])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_export_has_a_docstring():
    import roll_strategies

    missing = [
        n for n in roll_strategies.__all__ if n != "__version__" and not getattr(roll_strategies, n).__doc__
    ]
    assert not missing
