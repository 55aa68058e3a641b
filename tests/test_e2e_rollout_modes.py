"""The pipeline's rollout end to end (in-process backend): async mode, failing envs, nothing to train on."""

from __future__ import annotations

import pytest
import roll_envs
from roll_envs import FrozenLakeEnv
from roll_pipeline.config.compose import compose
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.pipeline import PipelineError
from small_runs import SMALL_FROZEN_LAKE, run_to_end

pytestmark = pytest.mark.slow

SMALL = [*SMALL_FROZEN_LAKE, "cluster.backend=local", "save_steps=100", "track_with=[]"]


class HalfBrokenLake(FrozenLakeEnv):
    """FrozenLake whose every even seed raises at the first step (its code neither waits nor draws: it keeps
    both hosting hints, declared again since it overrides `reset` and `step`)."""

    owns_random_state = True
    never_blocks = True

    def reset(self, seed=None, options=None):
        self.broken = seed is not None and seed % 2 == 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self.broken:
            raise RuntimeError("this lake is broken")
        return super().step(action)


def run(tmp_path, *overrides):
    cfg = compose(None, None, [*SMALL, f"output_dir={tmp_path}", "exp_name=e2e", *overrides])
    summary = run_to_end(cfg)
    rows = read_metrics(tmp_path / "e2e")
    assert rows[0]["step"] == 0 and "val/score/mean" in rows[0]  # the validation before training
    return summary, rows[1:]


def test_async_generation_trains_on_turns_within_the_staleness_bound(tmp_path):
    summary, rows = run(tmp_path, "max_steps=4", "eval_steps=4", "async_generation_ratio=1")
    assert summary.steps == 4 and [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["rollout/staleness/max"] <= 1 for r in rows)
    assert any(
        r["rollout/staleness/max"] == 1 for r in rows[1:]
    )  # later batches were generated during training
    assert all("actor/pg_loss" in r for r in rows)


def test_a_failing_env_lowers_success_and_every_failure_is_counted(tmp_path):
    roll_envs.register("half_broken_lake", HalfBrokenLake, override=True)
    summary, rows = run(
        tmp_path, "max_steps=2", "eval_steps=2", "custom_envs.FrozenLake.env_type=half_broken_lake"
    )
    first_val = summary.val_history[0][1]
    # validation seeds 1e9 .. 1e9+7: the four even ones fail, and they count as failures of their seed
    assert first_val["val/failed_episodes"] == 4
    assert first_val["val/env/FrozenLake/failed_episodes"] == 4
    assert first_val["val/env/FrozenLake/success"] <= 0.5
    assert sum(r["rollout/failed_episodes"] for r in rows) > 0
    for r in rows:  # the trained groups are all healthy, but the success rate saw the failures
        assert r["env/FrozenLake/failed_episodes"] == r["rollout/failed_episodes"]
        assert r["rollout/env_errors"] == r["rollout/failed_episodes"]
        assert r["env/FrozenLake/success"] <= 8 / (8 + r["rollout/failed_episodes"])


def test_steps_with_nothing_to_train_on_are_logged_and_then_stop_the_run(tmp_path, capsys):
    with pytest.raises(PipelineError, match="2 steps in a row had nothing to train on"):
        run(tmp_path, "max_steps=5", "eval_steps=5", "sequence_length=16", "max_consecutive_skipped_steps=2")
    assert "skipped: nothing to train on" in capsys.readouterr().out
