"""One data-parallel rank of `test_data_parallel.py`: trains a strategy on its share of fixed mini-batches.

Run as a script by each of N processes (`python dp_ranks.py RANK WORLD PORT MODEL_DIR OUT_FILE MODE...`) or,
for the one-rank reference, imported by the test (`run(mode, model_dir, rank=0, world=1, spec=None)`). Every
mini-batch is split as the pipeline splits it: rows balanced by tokens over the ranks
(`roll_algos.balance_partitions`), two rows per micro-batch, each micro-batch weighted by its share of the
whole mini-batch's response tokens (token-mean over the mini-batch).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch
from roll_algos import balance_partitions
from roll_strategies import DataParallelSpec, OptimizerSettings, StrategyError, create_strategy

LR, WARMUP, STEPS, POISONED_STEP, ROWS, PROMPT = 1e-3, 2, 5, 3, 8, 3
MODES = ("hf_train", "hf_critic", "zero2", "zero3")


def mini_batch(step: int) -> dict[str, torch.Tensor]:
    """ROWS rows of varied lengths (prompt PROMPT tokens, then response), right-padded to 16."""
    gen = torch.Generator().manual_seed(1000 + step)
    lengths = torch.randint(PROMPT + 1, 17, (ROWS,), generator=gen)
    positions = torch.arange(16).unsqueeze(0)
    mask = (positions < lengths.unsqueeze(1)).long()
    ids = torch.randint(8, 200, (ROWS, 16), generator=gen) * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "response_mask": mask.bool() & (positions >= PROMPT),
        "returns": torch.randn((ROWS, 16), generator=gen),
        "poison": torch.zeros(ROWS, dtype=torch.bool),
    }


def partitions(batch: dict[str, torch.Tensor], world: int) -> list[list[int]]:
    """The rows of each rank, balanced by tokens."""
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    return balance_partitions(lengths, world, equal_size=True) if world > 1 else [list(range(len(lengths)))]


def rank_micro_batches(step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches of mini-batch `step` (two rows each, trimmed to their longest row)."""
    batch = mini_batch(step)
    if step == POISONED_STEP:  # a row that lands on the last rank when there are several
        batch["poison"][partitions(batch, 2)[1][-1]] = True
    total = float(batch["response_mask"].sum())
    mine = partitions(batch, world)[rank]
    out = []
    for start in range(0, len(mine), 2):
        idx = torch.tensor(mine[start : start + 2])
        width = int(batch["attention_mask"][idx].sum(dim=1).max())
        mb = {k: v[idx][:, :width] if v.dim() == 2 else v[idx] for k, v in batch.items()}
        mb["loss_scale"] = torch.tensor(float(batch["response_mask"][idx].sum()) / total)
        out.append(mb)
    return out


def nll(log_probs, entropy, mb):
    """Token-mean NLL of the micro-batch's response tokens; NaN on a poisoned micro-batch."""
    m = mb["response_mask"].float()
    loss = -(log_probs * m).sum() / m.sum()
    loss = loss * math.nan if bool(mb["poison"].any()) else loss
    return loss, {"nll": float(loss.detach())}


def value_loss(values, mb):
    """Token-mean squared error to the returns; NaN on a poisoned micro-batch."""
    m = mb["response_mask"].float()
    loss = 0.5 * ((values - mb["returns"]).square() * m).sum() / m.sum()
    loss = loss * math.nan if bool(mb["poison"].any()) else loss
    return loss, {"vf": float(loss.detach())}


def build(mode: str, model_dir: Path, spec: DataParallelSpec | None) -> Any:
    """The strategy of `mode`."""
    common: dict[str, Any] = {
        "optimizer": OptimizerSettings(learning_rate=LR, warmup_steps=WARMUP),
        "data_parallel": spec,
    }
    if mode == "hf_train":
        return create_strategy("hf_train", "train", model_dir, **common)
    if mode == "hf_critic":
        return create_strategy("hf_critic", "critic", model_dir, **common)
    stage, _, dtype = mode.removeprefix("zero").partition("-")  # zero0 .. zero3, zero2-bfloat16, ...
    config = {"zero_optimization": {"stage": int(stage)}}
    return create_strategy(
        "deepspeed_train", "train", model_dir, strategy_config=config, dtype=dtype or "float32", **common
    )


def weights(mode: str, strategy: Any) -> dict[str, torch.Tensor]:
    """The trained weights, float32 on the CPU (gathered under ZeRO-3: every rank must call)."""
    if mode == "hf_critic":
        named = strategy.trainer.named_weights(strategy.model)
        return {n: t.detach().float().cpu().clone() for n, t in named.items()}
    return {n: torch.from_numpy(a) for n, a in strategy.export_weights().items()}


def optimizer_fraction(strategy: Any) -> float:
    """The share of AdamW's moments (exp_avg, exp_avg_sq: one element per parameter element each) this rank
    holds: about 1 / ranks under ZeRO 1-3, 1 for the hf strategies."""
    engine = getattr(strategy, "engine", None)
    optimizer = (
        strategy.optimizer if engine is None else getattr(engine.optimizer, "optimizer", engine.optimizer)
    )
    held = sum(
        t.numel() for s in optimizer.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")
    )
    total = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in strategy.model.parameters())
    return held / (2 * total)


def run(mode: str, model_dir: Path, rank: int, world: int, spec: DataParallelSpec | None) -> dict[str, Any]:
    """STEPS optimiser steps of `mode` on this rank's micro-batches: metrics per step, final weights, and the
    share of the parameters this rank holds."""
    strategy = build(mode, model_dir, spec)
    metrics = []
    for step in range(STEPS):
        mbs = rank_micro_batches(step, rank, world)
        if mode == "hf_critic":
            metrics.append(strategy.train_step(mbs, value_loss))
        else:
            metrics.append(strategy.train_step(mbs, nll, with_entropy=False))
    out: dict[str, Any] = {"metrics": metrics, "weights": weights(mode, strategy)}
    out["fraction"] = strategy.partition_fraction() if hasattr(strategy, "partition_fraction") else 1.0
    out["optimizer_fraction"] = optimizer_fraction(strategy)
    if mode == "zero2" and world > 1:  # ranks with different micro-batch counts: an error on all, no hang
        try:
            strategy.train_step(rank_micro_batches(0, rank, world)[: rank + 1], nll, with_entropy=False)
        except StrategyError as exc:
            out["unequal_counts_error"] = str(exc)
    return out


def main(argv: list[str]) -> None:
    rank, world, port, model_dir, out_file, *modes = argv
    torch.set_num_threads(1)
    spec = DataParallelSpec(rank=int(rank), world_size=int(world), master_port=int(port))
    results = {mode: run(mode, Path(model_dir), int(rank), int(world), spec) for mode in modes}
    torch.save(results, out_file)


if __name__ == "__main__":
    main(sys.argv[1:])
