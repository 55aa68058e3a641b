"""Nothing silent: a NaN/inf train step is skipped, counted, logged as it is, and too many in a row stop the run.

The update loop (`epochs.train_epochs`, which the actor and critic updates run) drives real train workers
with the run's real losses; the non-finite values come from the data, as a broken reward would bring them
(NaN advantages, NaN returns). The stop limit is read from the config by `settings.update_schedule`.
"""

from __future__ import annotations

import math

import pytest
import torch
from roll_algos import ActorLoss, CriticLoss
from roll_pipeline.assembly import settings
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.epochs import (
    NonFiniteStepsError,
    UpdateSchedule,
    check_nonfinite,
    first_nonfinite,
    merge_metrics,
)
from roll_pipeline.trainer.micro_batches import TrainLayout
from roll_strategies import ActorTrainWorker, CriticWorker, OptimizerSettings

ROWS, WIDTH = 8, 10
LAYOUT = TrainLayout("fixed", rows_per_micro_batch=2, rows_per_mini_batch=4, max_tokens=10_000, round_to=1)


def _schedule(limit: int) -> UpdateSchedule:
    return UpdateSchedule(
        ppo_epochs=1,
        seed=0,
        salt=1,
        max_steps=10,
        lr_scheduler_type="constant",
        min_lr_ratio=0.0,
        max_consecutive_nonfinite_steps=limit,
    )


def _rows() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(8, 200, (ROWS, WIDTH), generator=gen)
    response = torch.zeros(ROWS, WIDTH, dtype=torch.bool)
    response[:, 4:] = True
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": response}


def test_merge_keeps_nan_and_takes_the_last_running_count():
    steps = [
        {"loss": 1.0, "grad_norm": 2.0, "nonfinite_steps": 3.0, "nonfinite_in_a_row": 0.0},
        {"loss": math.nan, "grad_norm": math.nan, "nonfinite_steps": 4.0, "nonfinite_in_a_row": 1.0},
    ]
    merged = merge_metrics(steps, "actor")
    assert math.isnan(merged["actor/loss"]) and math.isnan(merged["actor/grad_norm"])
    assert merged["actor/nonfinite_steps"] == 4.0 and merged["actor/nonfinite_in_a_row"] == 1.0


def test_the_error_names_the_first_non_finite_quantity_and_the_step():
    assert first_nonfinite({"loss": 1.0, "grad_norm": 0.5}) == ""
    assert first_nonfinite({"loss": 1.0, "grad_norm": math.inf}) == "grad_norm=inf"
    metrics = {"loss": math.nan, "pg_loss": 0.1, "kl_loss": math.inf, "grad_norm": math.nan, "lr": 1e-3}
    assert first_nonfinite(metrics) == "loss=nan (non-finite too: kl_loss, grad_norm)"
    check_nonfinite({**metrics, "nonfinite_in_a_row": 2.0}, 3, prefix="critic", step=7, update=2)  # below
    with pytest.raises(NonFiniteStepsError) as err:
        check_nonfinite({**metrics, "nonfinite_in_a_row": 3.0}, 3, prefix="critic", step=7, update=2)
    message = str(err.value)
    for part in ("critic: 3 optimiser steps in a row", "optimiser step 2 of step 7", "loss=nan"):
        assert part in message, message
    assert "max_consecutive_nonfinite_steps=3" in message


def test_the_limit_comes_from_the_config():
    config = AgenticConfig(pretrain="builtin:tiny", max_consecutive_nonfinite_steps=2)
    for role in ("actor_train", "critic"):
        assert settings.update_schedule(config, role).max_consecutive_nonfinite_steps == 2
    assert AgenticConfig(pretrain="builtin:tiny").max_consecutive_nonfinite_steps == 5


def test_nan_advantages_skip_the_actor_steps_and_the_run_stops_at_the_limit(model_dir, train_once):
    cluster, worker = (
        LocalCluster(),
        ActorTrainWorker(model_dir, optimizer=OptimizerSettings(learning_rate=1e-3)),
    )
    rows = _rows()
    old = worker.compute_log_probs(rows, ROWS)
    advantages = torch.randn(ROWS, WIDTH, generator=torch.Generator().manual_seed(1)) * rows["response_mask"]
    fields = {**rows, "segment_ids": rows["response_mask"].long(), "old_log_probs": old}
    schedule = _schedule(limit=3)

    def update(step: int, adv: torch.Tensor) -> dict[str, float]:
        data = {**fields, "advantages": adv}
        ranks = RankGroup(cluster, [worker])
        return train_once(
            ranks, ActorLoss(), data, LAYOUT, prefix="actor", schedule=schedule, step=step, with_entropy=True
        )

    good = update(0, advantages)
    assert good["actor/nonfinite_steps"] == 0 and math.isfinite(good["actor/loss"])
    assert good["actor/optimizer_steps"] == 2  # one a mini-batch
    fingerprint = worker.weights_fingerprint()
    bad = update(1, advantages * math.nan)  # both mini-batches: 2 skipped steps in a row, 1 below the limit
    assert bad["actor/nonfinite_steps"] == 2 and bad["actor/nonfinite_in_a_row"] == 2
    assert math.isnan(bad["actor/loss"]) and math.isnan(bad["actor/pg_loss"])  # logged as they are
    assert worker.weights_fingerprint() == fingerprint  # nothing trained, nothing to sync
    assert update(2, advantages)["actor/nonfinite_in_a_row"] == 0  # an applied step ends the run of NaNs
    update(3, advantages * math.nan)
    with pytest.raises(NonFiniteStepsError, match=r"optimiser step 1 of step 5, had loss=nan"):
        update(4, advantages * math.nan)
    assert worker.strategy.trainer.nonfinite.total == 5


def test_nan_returns_skip_the_critic_step_and_its_metrics_say_so(model_dir, train_once):
    cluster, worker = LocalCluster(), CriticWorker(model_dir, optimizer=OptimizerSettings(learning_rate=1e-3))
    rows = _rows()
    returns = torch.ones(ROWS, WIDTH) * rows["response_mask"]
    returns[0, 5] = math.nan  # one row: only its mini-batch is skipped
    data = {**rows, "old_values": torch.zeros(ROWS, WIDTH), "returns": returns}
    schedule = _schedule(limit=2)
    metrics = train_once(
        RankGroup(cluster, [worker]), CriticLoss(0.5), data, LAYOUT, prefix="critic", schedule=schedule
    )
    assert metrics["critic/nonfinite_steps"] == 1 and math.isnan(metrics["critic/loss"])
    nan_batch_last = 0 in torch.randperm(ROWS, generator=schedule.generator(0))[4:].tolist()
    assert metrics["critic/nonfinite_in_a_row"] == float(nan_batch_last)
    assert math.isfinite(metrics["critic/lr"])
