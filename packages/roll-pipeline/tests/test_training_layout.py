from __future__ import annotations

import os

from roll_pipeline.runtime.placement import cpu_threads


def test_cpu_roles_default_to_every_core():
    # a Ray actor without CPUs reserved would otherwise run torch on one thread
    assert cpu_threads(None, "cpu") == (os.cpu_count() or 1)


def test_an_asynchronous_rollout_splits_the_cores_between_training_and_inference():
    cores = os.cpu_count() or 1
    assert cpu_threads(None, "cpu", share=0.5) == max(1, round(cores / 2))
    assert cpu_threads(4, "cpu", share=0.5) == 4


def test_configured_threads_and_gpu_roles_are_left_alone():
    assert cpu_threads(3, "cpu") == 3
    assert cpu_threads(None, "cuda:0") is None
    assert cpu_threads(2, "cuda") == 2
