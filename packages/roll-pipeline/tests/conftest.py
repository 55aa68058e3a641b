"""Shared fixtures of roll-pipeline's tests: tiny model folders (`roll_strategies.build_tiny_model`, random
init), built once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from roll_strategies import build_tiny_model


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
