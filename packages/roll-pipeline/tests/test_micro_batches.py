"""Micro-batch planning: every row once, under the token budget, ranks balanced, and a loss that does not
depend on how a mini-batch was split (the weights `build_micro_batches` gives each micro-batch)."""

from __future__ import annotations

import pytest
import torch
from roll_pipeline.assembly.settings import actor_loss
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.trainer.micro_batches import (
    TrainLayout,
    build_micro_batches,
    mini_batches,
    plan_micro_batches,
)


def layout(mode: str, rows: int = 8, max_tokens: int = 256, round_to: int = 8) -> TrainLayout:
    return TrainLayout(mode, rows, 10_000, max_tokens, round_to)


def lengths(seed: int = 0, n: int = 60) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(5, 60, (n,), generator=g) ** 1.3).long().clamp(max=150).tolist()


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_every_row_once_and_the_budget_holds(mode):
    ls = lengths()
    plan = plan_micro_batches(ls, layout(mode))[0]
    assert sorted(i for mb in plan for i in mb) == list(range(len(ls)))
    if mode == "dynamic":
        for mb in plan:
            assert len(mb) * -(-max(ls[i] for i in mb) // 8) * 8 <= 256
    if mode == "packed":
        capacity = -(-max(ls) // 8) * 8
        from roll_algos.packing import pack_lengths

        for mb in plan:
            assert len(pack_lengths([ls[i] for i in mb], capacity)) * capacity <= max(256, capacity)


def test_ranks_are_balanced_and_run_as_many_micro_batches():
    ls = lengths(1, 64)
    plans = plan_micro_batches(ls, layout("dynamic"), dp_size=4)
    assert sorted(i for plan in plans for mb in plan for i in mb) == list(range(64))
    tokens = [sum(ls[i] for mb in plan for i in mb) for plan in plans]
    assert max(tokens) - min(tokens) <= max(ls)  # Karmarkar-Karp's bound
    assert len({len(plan) for plan in plans}) == 1


def rows(seed: int = 2, n: int = 12, width: int = 40) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(n, width, dtype=torch.long)
    resp = torch.zeros(n, width, dtype=torch.bool)
    for r in range(n):
        p = int(torch.randint(3, 20, (1,), generator=g))
        q = int(torch.randint(1, width - p, (1,), generator=g))
        mask[r, : p + q] = 1
        resp[r, p : p + q] = True
    old = -torch.rand(n, width, generator=g) * resp
    return {
        "input_ids": torch.randint(5, 100, (n, width), generator=g) * mask,
        "attention_mask": mask,
        "response_mask": resp,
        "old_log_probs": old,
        "advantages": torch.randn(n, width, generator=g) * resp,
        "new": (old + 0.3 * torch.randn(n, width, generator=g)) * resp,
    }


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_weighted_micro_batch_losses_add_up_to_the_mini_batch_loss(agg, mode):
    cfg = tiny_config(loss_agg_mode=agg, skip_confident_tokens=None, sequence_length=64)
    loss_fn = actor_loss(cfg, 0.0)
    fields = rows()
    whole, _ = loss_fn(fields["new"], None, fields)
    idx = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    (mbs,), stats = build_micro_batches(fields, idx, layout(mode, rows=5, max_tokens=96), agg)
    assert len(mbs) > 1
    total = sum(float(mb["loss_scale"]) * float(loss_fn(mb["new"], None, mb)[0]) for mb in mbs)
    assert total == pytest.approx(float(whole), rel=1e-5)
    assert sum(float(mb["loss_scale"]) for mb in mbs) == pytest.approx(1.0)
    assert stats.real_tokens == int(fields["attention_mask"].sum())
    if mode == "packed":
        assert all(int(mb["pack_capacity"]) % 8 == 0 for mb in mbs)


def test_padding_stats_show_what_dynamic_batching_and_packing_remove():
    fields = rows(3, n=48)
    idx = torch.arange(48)
    out = {}
    for mode in ("fixed", "dynamic", "packed"):
        _, stats = build_micro_batches(
            fields, idx, layout(mode, rows=8, max_tokens=160, round_to=1), "token-mean"
        )
        out[mode] = stats.metrics("actor")
    assert out["fixed"]["actor/padding_fraction"] > out["dynamic"]["actor/padding_fraction"]
    assert out["fixed"]["actor/padding_fraction"] > 2 * out["packed"]["actor/padding_fraction"]
    assert (
        out["packed"]["actor/removed_padding_ratio"] > 0.8
        and out["dynamic"]["actor/removed_padding_ratio"] > 0.8
    )
    assert out["fixed"]["actor/naive_padding_fraction"] == out["packed"]["actor/naive_padding_fraction"]


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_each_rank_gets_its_share_and_the_shares_add_up_to_the_one_rank_loss(mode):
    cfg = tiny_config(loss_agg_mode="token-mean", skip_confident_tokens=None, sequence_length=64)
    loss_fn = actor_loss(cfg, 0.0)
    fields = rows(4, n=12)
    idx = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    lay = layout(mode, rows=2, max_tokens=96)
    (one,), one_stats = build_micro_batches(fields, idx, lay, "token-mean")
    per_rank, stats = build_micro_batches(fields, idx, lay, "token-mean", ranks=3)
    assert len(per_rank) == 3 and len({len(mbs) for mbs in per_rank}) == 1  # as many on every rank

    def total(mbs):
        return sum(float(mb["loss_scale"]) * float(loss_fn(mb["new"], None, mb)[0]) for mb in mbs)

    def real_rows(mbs):
        return sorted(
            tuple(ids[mask.bool()].tolist())
            for mb in mbs
            for ids, mask in zip(mb["input_ids"], mb["attention_mask"], strict=True)
        )

    # every row on exactly one rank; the weighted losses of all ranks add up to the one-rank loss
    assert sorted(r for mbs in per_rank for r in real_rows(mbs)) == real_rows(one)
    assert sum(total(mbs) for mbs in per_rank) == pytest.approx(total(one), rel=1e-5)
    assert sum(float(mb["loss_scale"]) for mbs in per_rank for mb in mbs) == pytest.approx(1.0)
    assert stats.real_tokens == one_stats.real_tokens
    tokens = [int(mb["attention_mask"].sum()) for mbs in per_rank for mb in mbs]
    assert sum(tokens) == stats.real_tokens
    if mode == "packed":  # one capacity, the mini-batch's, on every rank
        assert {int(mb["pack_capacity"]) for mbs in per_rank for mb in mbs} == {int(one[0]["pack_capacity"])}


def test_a_rank_short_of_rows_runs_zero_weight_copies():
    fields = rows(5, n=3)
    per_rank, stats = build_micro_batches(
        fields, torch.arange(3), layout("fixed", rows=1), "token-mean", ranks=4
    )
    assert [len(mbs) for mbs in per_rank] == [1, 1, 1, 1]  # ZeRO runs every rank in every forward
    scales = sorted(float(mbs[0]["loss_scale"]) for mbs in per_rank)
    assert scales[0] == 0.0 and sum(scales) == pytest.approx(1.0)
    assert stats.micro_batches == 3  # the copies are no work of the mini-batch's


def test_mini_batches_are_equal_and_cover_every_row_once():
    for n, cap in [(580, 192), (576, 192), (5, 192), (193, 192), (1, 1)]:
        chunks = mini_batches(torch.randperm(n), cap)
        sizes = [len(c) for c in chunks]
        assert len(chunks) == -(-n // cap) and max(sizes) <= cap and max(sizes) - min(sizes) <= 1
        assert sorted(torch.cat(chunks).tolist()) == list(range(n))
