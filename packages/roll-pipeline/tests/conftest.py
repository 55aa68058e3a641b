"""Shared fixtures of roll-pipeline's tests: tiny model folders (`roll_strategies.build_tiny_model`, random
init), built once per session, and `train_once`, one `train_epochs` update of a role's ranks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from roll_pipeline.runtime.ranks import RankGroup
from roll_pipeline.trainer.epochs import UpdateSchedule, train_epochs
from roll_pipeline.trainer.micro_plan import TrainLayout
from roll_strategies import build_tiny_model

ONE_EPOCH = UpdateSchedule(1, 0, 1, 10, "constant", 0.0)
"""One pass over the rows at a constant learning rate."""


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """`tiny_model(seed)`: the folder of a tiny model with that seed's random weights (one build per seed)."""
    built: dict[int, Path] = {}

    def folder(seed: int) -> Path:
        if seed not in built:
            out = tmp_path_factory.mktemp(f"tiny-seed{seed}") / "model"
            built[seed] = build_tiny_model(out, vocab_texts=["Left Right Up Down"], seed=seed)
        return built[seed]

    return folder


@pytest.fixture(scope="session")
def model_dir(tiny_model: Callable[[int], Path]) -> Path:
    """The seed-0 tiny model folder (tests only read it)."""
    return tiny_model(0)


@pytest.fixture(scope="session")
def train_once() -> Callable[..., dict[str, float]]:
    """`train_once(ranks, loss, fields, layout, prefix=..., schedule=ONE_EPOCH, step=0, **options)`: the metrics
    of one `train_epochs` update whose micro-batches are weighted by their tokens (agg_mode token-mean);
    `options` go to `train_epochs` (groups, with_entropy)."""

    def update(
        ranks: RankGroup,
        loss: Any,
        fields: dict[str, Any],
        layout: TrainLayout,
        *,
        prefix: str,
        schedule: UpdateSchedule = ONE_EPOCH,
        step: int = 0,
        **options: Any,
    ) -> dict[str, float]:
        run = train_epochs(
            ranks, loss, fields, layout, schedule, step, agg_mode="token-mean", prefix=prefix, **options
        )
        return asyncio.run(run)[0]

    return update
