"""Data-parallel train ranks on the CPU: 2 gloo ranks take the step 1 rank takes on the same rows.

The two ranks are two processes running `dp_ranks.py` (hf_train, hf_critic, DeepSpeed ZeRO-2 and ZeRO-3 in one
group, one after the other); the one-rank reference runs the same code in this process. Five optimiser
steps, the fourth with a NaN loss on the second rank's rows (skipped everywhere).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import dp_ranks as dp
import pytest
import torch
from gloo_ranks import run_ranks
from roll_strategies import DataParallelSpec, StrategyError, join_group

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
WORLD = 2


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory) -> list[dict]:
    """Each rank's results per mode (both ranks run in one group, modes one after the other)."""
    modes = [m for m in dp.MODES if HAS_DEEPSPEED or not m.startswith("zero")]
    return run_ranks(dp.__file__, WORLD, tiny_model_dir, tmp_path_factory.mktemp("dp"), modes)


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _check_equal_to_one_rank(mode: str, tiny_model_dir: Path, two_ranks: list[dict]) -> float:
    one = dp.run(mode, tiny_model_dir, 0, 1, None)
    ranks = [results[mode] for results in two_ranks]
    for step, (ours, theirs) in enumerate(zip(ranks[0]["metrics"], one["metrics"], strict=True)):
        assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-9), step
        if step == dp.POISONED_STEP:  # a NaN loss on rank 1 skips the step on both ranks
            assert math.isnan(ours["loss"]) and math.isnan(ours["grad_norm"])
            assert ours["nonfinite_steps"] == theirs["nonfinite_steps"] == 1
            continue
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5), step
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4), step
    # the group's metrics, the same on every rank (repr: NaN == NaN)
    assert repr(ranks[1]["metrics"]) == repr(ranks[0]["metrics"])
    assert ranks[0]["metrics"][-1]["nonfinite_in_a_row"] == 0
    diff = _max_abs_diff(ranks[0]["weights"], one["weights"])
    print(f"\n{mode}: max |w(DP=2) - w(DP=1)| = {diff:.3g}, rank-0 partition = {ranks[0]['fraction']:.4f}")
    assert diff <= 1e-5
    return diff


@pytest.mark.parametrize("mode", ["hf_train", "hf_critic"])
def test_two_hf_ranks_step_as_one(mode, tiny_model_dir, two_ranks):
    _check_equal_to_one_rank(mode, tiny_model_dir, two_ranks)
    first, second = (results[mode]["weights"] for results in two_ranks)
    assert _max_abs_diff(first, second) == 0.0  # summed gradients: every rank steps identically


@pytest.mark.deepspeed
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_two_deepspeed_ranks_step_as_one(mode, tiny_model_dir, two_ranks):
    _check_equal_to_one_rank(mode, tiny_model_dir, two_ranks)
    fractions = [results[mode]["fraction"] for results in two_ranks]
    if mode == "zero3":  # each rank holds about half of every parameter (DeepSpeed pads partitions)
        assert all(f == pytest.approx(1 / WORLD, abs=0.01) for f in fractions), fractions
    else:
        assert fractions == [1.0, 1.0]
    # ZeRO-2 and -3 partition the optimiser state: each rank holds half of AdamW's moments (padding aside)
    optimizer_shares = [results[mode]["optimizer_fraction"] for results in two_ranks]
    assert all(f == pytest.approx(1 / WORLD, abs=0.01) for f in optimizer_shares), optimizer_shares
    assert sum(optimizer_shares) == pytest.approx(1.0, abs=0.01)


@pytest.mark.deepspeed
def test_unequal_micro_batch_counts_fail_on_every_rank_instead_of_hanging(two_ranks):
    errors = [results["zero2"].get("unequal_counts_error", "") for results in two_ranks]
    assert all("same number of micro-batches on every rank, got [1, 2]" in e for e in errors), errors


def test_spec_and_group_errors_are_clear():
    with pytest.raises(StrategyError, match="0 <= rank < world_size"):
        DataParallelSpec(rank=2, world_size=2, master_port=1234)
    with pytest.raises(StrategyError, match="master_port"):
        DataParallelSpec(rank=0, world_size=2)
    assert DataParallelSpec(rank=1, world_size=2, master_port=29500).env()["WORLD_SIZE"] == "2"
    alone = join_group(None, torch.device("cpu"))
    assert (alone.rank, alone.size, alone.all_gather(3)) == (0, 1, [3])
