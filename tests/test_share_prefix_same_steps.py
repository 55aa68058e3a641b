"""`share_prefix` changes only the arithmetic: the tiny four_choice recipe (128 rows a rollout, two optimiser steps
of 64) trained two steps with the switch on and off puts the same rows into each optimiser step, so the same seed
trains the same steps: the same episodes, and grad_norm and entropy equal to float noise. Before both paths cut
mini-batches of whole groups, the dense path shuffled rows and trained other optimiser steps (grad_norm 0.74
against 0.24 at step 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from roll_pipeline.config.compose import compose
from roll_pipeline.observe.plotting import read_metrics
from small_runs import run_to_end

EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "tiny-cpu-agentic"
COMPARED = ("actor/grad_norm", "actor/entropy", "actor/pg_loss", "critic/score/mean")


def two_steps(tmp_path: Path, share: bool) -> list[dict[str, float]]:
    """The metrics of steps 1 and 2 of the recipe, seed 0, in this process, validation only after the end."""
    out = tmp_path / str(share)
    overrides = [
        "max_steps=2",
        "eval_steps=1000",
        "save_steps=1000",
        "validate_at_start=false",
        "val_env_manager.num_env_groups=4",
        f"share_prefix={str(share).lower()}",
        f"output_dir={out}",
        "cluster.backend=local",
        "track_with=[]",
        "print_baselines=false",
    ]
    run_to_end(compose(str(EXAMPLE_DIR), "agent_four_choice", overrides))
    return [r for r in read_metrics(out / "four_choice_tiny") if r["step"] in (1, 2)]


@pytest.mark.slow  # two runs of 2 steps of the tiny model, about 6 s each
def test_the_same_seed_trains_the_same_steps_with_share_prefix_on_and_off(tmp_path):
    shared, dense = two_steps(tmp_path, True), two_steps(tmp_path, False)
    assert [r["step"] for r in shared] == [r["step"] for r in dense] == [1, 2]
    for on, off in zip(shared, dense, strict=True):
        for key in COMPARED:
            got = (on["step"], key, on[key], off[key])
            assert on[key] == pytest.approx(off[key], rel=1e-3, abs=1e-6), got
