"""`RankGroup` fans a role's calls out to its data-parallel ranks: rows shared out and put back in order, each
rank's own micro-batches, rank 0's bucket for the weight sync; and `LocalCluster.spawn_ranks` runs real ranks as
child processes that train as one rank does on the same rows."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import pytest
import torch
from roll_algos import ActorLoss
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.ranks import RankGroup, row_shares
from roll_pipeline.trainer.micro_batches import TrainLayout
from roll_strategies import ActorTrainWorker, OptimizerSettings

ROWS, WIDTH = 8, 12


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class FakeRank:
    """Answers like a train worker, recording what it was given."""

    def __init__(self, rank: int) -> None:
        self.rank, self.seen_rows, self.steps, self.buckets = rank, [], [], []

    def compute_log_probs(self, batch, micro_batch_size):
        self.seen_rows.append(int(batch["input_ids"].shape[0]))
        return batch["input_ids"].float()

    def compute_reference_kl(self, batch, micro_batch_size):
        return Pair(batch["input_ids"].float(), -batch["input_ids"].float())

    def train_step(self, micro_batches, loss_fn, *, lr_scale=1.0):
        self.steps.append(len(micro_batches))
        return {"loss": float(self.rank), "lr": lr_scale}

    def weight_sync_plan(self, version, *, dtype, bucket_bytes):
        return ("plan", version, self.rank)

    def weight_bucket(self, plan, index):
        self.buckets.append((plan, index))
        return ("bucket", plan, index)


def test_row_shares_cover_every_row_once_and_are_equal():
    for rows, ranks in [(8, 2), (7, 3), (2, 4), (1, 1)]:
        shares = row_shares(rows, ranks)
        assert len({len(s) for s in shares}) == 1  # every rank as many forwards
        per = len(shares[0])
        real = [s[: max(0, min(per, rows - r * per))] for r, s in enumerate(shares)]
        assert torch.cat(real).tolist() == list(range(rows))


def test_rows_are_shared_out_and_put_back_in_order():
    cluster, fakes = LocalCluster(), [FakeRank(r) for r in range(3)]
    group = RankGroup(cluster, fakes)
    batch = {"input_ids": torch.arange(7 * 4).reshape(7, 4), "attention_mask": torch.ones(7, 4)}
    out = asyncio.run(group.map_rows("compute_log_probs", batch, 2))
    assert torch.equal(out, batch["input_ids"].float())
    assert [f.seen_rows for f in fakes] == [[3], [3], [3]]  # 3 + 3 + 1 real rows, the last padded
    pair = asyncio.run(group.map_rows("compute_reference_kl", batch, 2))
    assert isinstance(pair, Pair) and torch.equal(pair.second, -batch["input_ids"].float())


def test_each_rank_trains_on_its_own_micro_batches_and_rank_0_reports():
    fakes = [FakeRank(r) for r in range(2)]
    group = RankGroup(LocalCluster(), fakes)
    metrics = asyncio.run(group.train_step([[{}], [{}, {}]], None, lr_scale=0.5))
    assert metrics == {"loss": 0.0, "lr": 0.5} and [f.steps for f in fakes] == [[1], [2]]
    with pytest.raises(ValueError, match="micro-batches for 2 ranks, got 1"):
        asyncio.run(group.train_step([[{}]], None))


@pytest.mark.parametrize("gathers", [False, True])
def test_rank_0_serves_the_buckets_and_under_zero3_every_rank_gathers_with_its_plan(gathers):
    fakes = [FakeRank(r) for r in range(2)]
    group = RankGroup(LocalCluster(), fakes, gathers_weights=gathers)

    async def sync():
        plan = await group.weight_sync_plan(3, dtype="float32", bucket_bytes=1)
        bucket, others = group.weight_bucket(plan, 0)
        await others
        return await bucket

    assert asyncio.run(sync()) == ("bucket", ("plan", 3, 0), 0)
    assert fakes[0].buckets == [(("plan", 3, 0), 0)]
    assert fakes[1].buckets == ([(("plan", 3, 1), 0)] if gathers else [])


def _fields() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(6, WIDTH + 1, (ROWS,), generator=gen)
    positions = torch.arange(WIDTH).unsqueeze(0)
    mask = (positions < lengths.unsqueeze(1)).long()
    response = mask.bool() & (positions >= 4)
    return {
        "input_ids": torch.randint(8, 200, (ROWS, WIDTH), generator=gen) * mask,
        "attention_mask": mask,
        "response_mask": response,
        "segment_ids": response.long(),
        "advantages": torch.randn(ROWS, WIDTH, generator=gen) * response,
    }


@pytest.mark.slow  # two child processes load torch and the model
def test_two_rank_processes_train_as_one_rank_does(model_dir, tmp_path, train_once):
    layout = TrainLayout(
        "fixed", rows_per_micro_batch=2, rows_per_mini_batch=4, max_tokens=10_000, round_to=1
    )
    kwargs = {"optimizer": OptimizerSettings(learning_rate=1e-3, warmup_steps=0), "num_threads": 1}
    cluster = LocalCluster()
    try:
        ranks = RankGroup(
            cluster,
            cluster.spawn_ranks(ActorTrainWorker, str(model_dir), name="t", rank_kwargs=[{}, {}], **kwargs),
        )
        one = RankGroup(cluster, [ActorTrainWorker(model_dir, **kwargs)])
        fields = _fields()
        for group in (ranks, one):
            fields["old_log_probs"] = asyncio.run(group.map_rows("compute_log_probs", fields, 3))
            loss = ActorLoss(agg_mode="token-mean")  # the loss units the micro-batch weights count
            metrics = train_once(group, loss, fields, layout, prefix="a", with_entropy=False)
            assert metrics["a/micro_batches"] == 4  # 2 mini-batches x 2 micro-batches, on 1 or 2 ranks
        got, want = (asyncio.run(g.call_main("export_weights")) for g in (ranks, one))
        diff = max(float(abs(got[k] - want[k]).max()) for k in want)
        print(f"2 rank processes vs 1 rank: max weight difference {diff:.2e}")
        assert diff < 1e-5
        asyncio.run(ranks.call_all("save_checkpoint", str(tmp_path / "ckpt")))  # rank 0 writes, all wait
        assert (tmp_path / "ckpt" / "model.safetensors").is_file()
    finally:
        cluster.shutdown()


@pytest.mark.slow  # child processes load torch
def test_a_rank_that_cannot_be_built_stops_them_all_with_its_error():
    cluster = LocalCluster()
    with pytest.raises(TypeError, match="data_parallel"):  # int() takes no such argument
        cluster.spawn_ranks(int, name="bad", rank_kwargs=[{}, {}])
    cluster.shutdown()
