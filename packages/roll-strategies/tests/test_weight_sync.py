from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from roll_strategies import (
    ActorInferWorker,
    ActorTrainWorker,
    HFInferStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    StaleWeightsError,
    StrategyError,
    TensorSpec,
    WeightSyncError,
    build_tiny_model,
    plan_buckets,
    sync_weights,
    weight_sync_due,
)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 200, (6, 10), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def nll_loss(log_probs, entropy, mb):
    loss = -log_probs[:, 1:].mean()
    return loss, {}


@pytest.fixture()
def trained(tiny_model_dir) -> HFTrainStrategy:
    train = HFTrainStrategy(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    train.train_step([_batch(1)], nll_loss, with_entropy=False)
    return train


@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    bucket_bytes=st.integers(1, 700),
    itemsize=st.sampled_from([1, 2, 4]),
)
def test_buckets_are_bounded_and_cover_every_element_once(sizes, bucket_bytes, itemsize):
    tensors = [TensorSpec(f"t{i}", (n,)) for i, n in enumerate(sizes)]
    buckets = plan_buckets(tensors, bucket_bytes=bucket_bytes, itemsize=itemsize)
    capacity = max(1, bucket_bytes // itemsize)
    assert all(0 < sum(s.stop - s.start for s in b) <= capacity for b in buckets)
    covered: dict[str, list[tuple[int, int]]] = {}
    for piece in (s for b in buckets for s in b):
        covered.setdefault(piece.name, []).append((piece.start, piece.stop))
    for spec in tensors:  # contiguous, in order, from 0 to numel
        ranges = covered[spec.name]
        assert ranges[0][0] == 0 and ranges[-1][1] == spec.numel
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    # a tensor that fits in one bucket is never split
    assert all(len(covered[t.name]) == 1 for t in tensors if t.numel <= capacity)


def test_bucketed_sync_gives_the_trainers_log_probs(tiny_model_dir, trained):
    infer = HFInferStrategy(tiny_model_dir)
    batch = _batch(2)
    before = infer.compute_log_probs(batch, 6)
    metrics = sync_weights(trained, infer, version=3, dtype="float32", bucket_bytes=20_000)
    after = infer.compute_log_probs(batch, 6)
    assert not torch.equal(before, after)
    assert torch.equal(after, trained.compute_log_probs(batch, 6))
    plan = trained.weight_sync_plan(3, dtype="float32", bucket_bytes=20_000)
    assert metrics["weight_sync/buckets"] == plan.num_buckets > 5
    assert (
        metrics["weight_sync/bytes"]
        == plan.total_bytes
        == 4 * sum(p.numel() for p in trained.model.parameters())
    )
    assert metrics["weight_sync/seconds"] > 0 and metrics["weight_sync/mb_per_s"] > 0
    assert all(trained.weight_bucket(plan, i).nbytes <= 20_000 for i in range(plan.num_buckets))
    assert infer.policy_version == 3 and infer.weights_fingerprint() == trained.weights_fingerprint()


def test_sync_in_the_inference_dtype(tiny_model_dir, trained):
    bucketed = HFInferStrategy(tiny_model_dir, dtype="bfloat16")
    one_shot = HFInferStrategy(tiny_model_dir, dtype="bfloat16")
    metrics = sync_weights(trained, bucketed, version=1, dtype="bfloat16", bucket_bytes=10_000)
    one_shot.update_weights(trained.export_weights(), version=1)
    assert metrics["weight_sync/bytes"] == 2 * sum(p.numel() for p in trained.model.parameters())
    plan = trained.weight_sync_plan(1, dtype="bfloat16", bucket_bytes=10_000)
    assert plan.dtype == "bfloat16" and trained.weight_bucket(plan, 0).data.dtype == torch.bfloat16
    batch = _batch(3)
    assert torch.equal(bucketed.compute_log_probs(batch, 6), one_shot.compute_log_probs(batch, 6))


def test_unchanged_weights_are_not_sent_again(tiny_model_dir, trained):
    infer = ActorInferWorker(tiny_model_dir)
    train = ActorTrainWorker(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=3e-3))
    first = sync_weights(train, infer, version=1, dtype="float32")
    again = sync_weights(train, infer, version=2, dtype="float32")
    assert first["weight_sync/skipped"] == 0 and first["weight_sync/bytes"] > 0
    assert again["weight_sync/skipped"] == 1 and again["weight_sync/bytes"] == 0
    assert infer.get_policy_version() == 2  # the version moves on without a transfer
    train.train_step([_batch(4)], nll_loss, with_entropy=False)
    third = sync_weights(train, infer, version=3, dtype="float32")
    assert third["weight_sync/skipped"] == 0
    forced = sync_weights(train, infer, version=4, dtype="float32", force=True)
    assert forced["weight_sync/skipped"] == 0 and forced["weight_sync/bytes"] == first["weight_sync/bytes"]


def test_model_update_frequency():
    assert [s for s in range(10) if weight_sync_due(s, 3)] == [0, 3, 6, 9]
    assert all(weight_sync_due(s, 1) for s in range(5))
    with pytest.raises(StrategyError, match="model_update_frequency >= 1"):
        weight_sync_due(0, 0)


def _snapshot(infer: HFInferStrategy) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in infer.model.state_dict().items()}


def _assert_unchanged(infer: HFInferStrategy, snapshot: dict[str, torch.Tensor]) -> None:
    assert all(torch.equal(v, snapshot[k]) for k, v in infer.model.state_dict().items())


def test_stale_update_is_rejected_and_weights_kept(tiny_model_dir, trained):
    infer = HFInferStrategy(tiny_model_dir)
    sync_weights(trained, infer, version=5, dtype="float32")
    trained.train_step([_batch(5)], nll_loss, with_entropy=False)
    snapshot = _snapshot(infer)
    plan = trained.weight_sync_plan(4, dtype="float32", bucket_bytes=1 << 20)
    with pytest.raises(StaleWeightsError, match=r"version >= 5.*got version 4.*old weights are kept"):
        infer.receive_weight_bucket(trained.weight_bucket(plan, 0))
    with pytest.raises(StaleWeightsError):
        infer.update_weights(trained.export_weights(), version=2)
    _assert_unchanged(infer, snapshot)
    assert infer.policy_version == 5


def test_partial_or_out_of_order_update_is_rejected_and_weights_kept(tiny_model_dir, trained):
    infer = HFInferStrategy(tiny_model_dir)
    snapshot = _snapshot(infer)
    plan = trained.weight_sync_plan(1, dtype="float32", bucket_bytes=30_000)
    buckets = [trained.weight_bucket(plan, i) for i in range(plan.num_buckets)]
    assert infer.receive_weight_bucket(buckets[0]) is None
    with pytest.raises(
        WeightSyncError, match=r"Expected bucket 1 of \d+.*got bucket 2.*partial update is rejected"
    ):
        infer.receive_weight_bucket(buckets[2])  # bucket 1 missing
    with pytest.raises(WeightSyncError, match="bucket 0 of a new update"):
        infer.receive_weight_bucket(buckets[1])  # the broken update was dropped
    _assert_unchanged(infer, snapshot)
    assert infer.policy_version == 0
    # an update cut short, then a fresh one: the unfinished one is dropped, the new one applies
    for bucket in buckets[:-1]:
        infer.receive_weight_bucket(bucket)
    _assert_unchanged(infer, snapshot)
    for bucket in buckets:
        metrics = infer.receive_weight_bucket(bucket)
    assert (
        metrics is not None and infer.policy_version == 1 and infer.receiver.aborted_updates == 2
    )  # the rejected one and the cut one
    batch = _batch(6)
    assert torch.equal(infer.compute_log_probs(batch, 6), trained.compute_log_probs(batch, 6))


def test_tampered_bucket_and_moved_weights_are_rejected(tiny_model_dir, trained):
    infer = HFInferStrategy(tiny_model_dir)
    plan = trained.weight_sync_plan(1, dtype="float32", bucket_bytes=30_000)
    first = trained.weight_bucket(plan, 0)
    infer.receive_weight_bucket(first)
    forged = dataclasses.replace(trained.weight_bucket(plan, 1), fingerprint="other:0")
    with pytest.raises(WeightSyncError, match="missing or out of order"):
        infer.receive_weight_bucket(forged)
    trained.train_step([_batch(7)], nll_loss, with_entropy=False)  # weights move mid-sync
    with pytest.raises(WeightSyncError, match="a train step or checkpoint load ran mid-sync"):
        trained.weight_bucket(plan, 1)


def test_update_from_another_model_is_rejected_at_bucket_zero(tiny_model_dir, tmp_path, trained):
    other = build_tiny_model(
        tmp_path / "wide", vocab_texts=["hello"], hidden_size=64, num_heads=2, num_kv_heads=1
    )
    infer = HFInferStrategy(other)
    plan = trained.weight_sync_plan(1, dtype="float32", bucket_bytes=1 << 20)
    with pytest.raises(WeightSyncError, match=r"shape mismatches=.*same model folder"):
        infer.receive_weight_bucket(trained.weight_bucket(plan, 0))


def test_a_replayed_stale_bucket_leaves_the_update_in_flight_alone(tiny_model_dir, trained):
    infer = HFInferStrategy(tiny_model_dir)
    sync_weights(trained, infer, version=5, dtype="float32")
    old_plan = trained.weight_sync_plan(4, dtype="float32", bucket_bytes=100_000)
    stale = trained.weight_bucket(old_plan, 0)
    trained.train_step([_batch(8)], nll_loss, with_entropy=False)
    plan = trained.weight_sync_plan(6, dtype="float32", bucket_bytes=100_000)
    infer.receive_weight_bucket(trained.weight_bucket(plan, 0))
    with pytest.raises(StaleWeightsError):
        infer.receive_weight_bucket(stale)
    for index in range(1, plan.num_buckets):
        metrics = infer.receive_weight_bucket(trained.weight_bucket(plan, index))
    assert metrics is not None and infer.policy_version == 6
