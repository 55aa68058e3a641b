"""The pipeline's weight-update phase: trainer -> policy server through the bucketed versioned sync.

References are independent of the code under test: the trainer's own `compute_log_probs` (teacher-forced
forward of the trained weights) for the log-probs the server samples with, and the parameter count times
the dtype's size for the bytes sent.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.weight_update import WeightUpdater
from roll_rollout import GenerateRequest, SamplingSettings
from roll_strategies import ActorTrainWorker, OptimizerSettings


def nll_loss(log_probs, entropy, mb):
    return -log_probs[:, 1:].mean(), {}


def _batch(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 200, (4, 12), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _train(worker: ActorTrainWorker, seed: int) -> None:
    worker.train_step([_batch(seed)], nll_loss, with_entropy=False)


def _sample(server: PolicyServer, prompts: list[list[int]], greedy: bool = False):
    sampling = SamplingSettings(max_new_tokens=6, greedy=greedy)
    return server._generate_batch([GenerateRequest(p, sampling) for p in prompts])


def _trainer_log_probs(train: ActorTrainWorker, prompt: list[int], output: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + output])
    lps = train.compute_log_probs({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 1)
    return lps[0, len(prompt) :]


def _updater(cluster, train, server, frequency: int = 1, bucket_bytes: int = 30_000) -> WeightUpdater:
    return WeightUpdater(
        cluster,
        RankGroup(cluster, [train]),
        server,
        dtype="float32",
        frequency=frequency,
        bucket_bytes=bucket_bytes,
    )


def test_sampling_log_probs_after_a_sync_equal_the_trainers(model_dir):
    cluster = LocalCluster()
    train = ActorTrainWorker(model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    server = PolicyServer(model_dir, seed=1)
    update = _updater(cluster, train, server)
    asyncio.run(update(0))
    _train(train, 1)
    _train(train, 2)
    prompts = [[11, 12, 13, 14], [20, 21, 22], [30, 31, 32, 33, 34]]
    stale = _sample(server, prompts)
    metrics = asyncio.run(update(1))
    fresh = _sample(server, prompts)
    for prompt, result in zip(prompts, fresh, strict=True):
        expected = _trainer_log_probs(train, prompt, result.output_ids)
        assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-5)
        assert result.policy_version == 1
    assert all(r.policy_version == 0 for r in stale)
    # the stale server's log-probs are not the trainer's: the check above can fail
    gaps = [
        (torch.tensor(r.log_probs) - _trainer_log_probs(train, p, r.output_ids)).abs().max()
        for p, r in zip(prompts, stale, strict=True)
    ]
    assert max(gaps) > 1e-3
    params = sum(p.numel() for p in train.strategy.model.parameters())
    assert metrics["weight_sync/bytes"] == 4 * params
    assert metrics["weight_sync/buckets"] == -(-4 * params // 30_000) > 1
    assert metrics["weight_sync/skipped"] == 0 and metrics["weight_sync/mb_per_s"] > 0
    assert metrics["weight_sync/version"] == 1 and metrics["weight_sync/policy_lag"] == 0


def test_model_update_frequency_serves_the_last_synced_version(model_dir):
    cluster = LocalCluster()
    train = ActorTrainWorker(model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    server = PolicyServer(model_dir, seed=1)
    update = _updater(cluster, train, server, frequency=3)
    versions, sent = [], []
    for step in range(7):
        if step:
            _train(train, step)
        metrics = asyncio.run(update(step, force=step == 0))
        versions.append(_sample(server, [[11, 12]], greedy=True)[0].policy_version)
        sent.append(metrics["weight_sync/bytes"] > 0)
        assert metrics["weight_sync/policy_lag"] == step - versions[-1]
    assert versions == [0, 0, 0, 3, 3, 3, 6]
    assert sent == [True, False, False, True, False, False, True]


def test_unchanged_weights_move_only_the_version(model_dir):
    cluster = LocalCluster()
    train = ActorTrainWorker(model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    server = PolicyServer(model_dir, seed=1)
    update = _updater(cluster, train, server)
    assert asyncio.run(update(0))["weight_sync/bytes"] > 0
    again = asyncio.run(update(1))  # no train step in between: same fingerprint
    assert again["weight_sync/skipped"] == 1 and again["weight_sync/bytes"] == 0
    assert _sample(server, [[11, 12]])[0].policy_version == 1 == update.served_version


@pytest.mark.deepspeed
@pytest.mark.slow
def test_log_probs_after_a_sync_from_deepspeed_zero3_equal_the_trainers(model_dir):
    pytest.importorskip("deepspeed")
    cluster = LocalCluster()
    train = ActorTrainWorker(
        model_dir,
        strategy_name="deepspeed_train",
        strategy_config={"zero_optimization": {"stage": 3}},
        optimizer=OptimizerSettings(learning_rate=3e-3),
    )
    server = PolicyServer(model_dir, seed=1)
    update = _updater(cluster, train, server, bucket_bytes=20_000)
    _train(train, 1)
    metrics = asyncio.run(update(1, force=True))
    assert metrics["weight_sync/buckets"] > 1
    prompts = [[11, 12, 13, 14], [20, 21, 22]]
    for prompt, result in zip(prompts, _sample(server, prompts), strict=True):
        expected = _trainer_log_probs(train, prompt, result.output_ids)
        assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-5)
        assert result.policy_version == 1
