"""`val_subset_size`: every validation but the one at max_steps plays the first N of the fixed validation
seeds; the one at max_steps plays them and then all. The curve, its flips and its baselines stay on the same
episodes, the end is measured on all."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import roll_envs
from roll_pipeline.assembly.settings import LoopSettings
from roll_pipeline.config.compose import ConfigError, compose, tiny_config
from roll_pipeline.observe.flips import ValidationFlips
from roll_pipeline.observe.report import print_final_report, print_run_header
from roll_pipeline.observe.summary import RunSummary
from roll_pipeline.pipeline import AgenticPipeline
from roll_rollout import RolloutBatch, Trajectory, validation_seeds


def _loop(subset: int | None, every: int = 8, max_steps: int = 10) -> LoopSettings:
    return LoopSettings(
        max_steps=max_steps,
        eval_steps=5,
        logging_steps=1,
        save_steps=10,
        validate_at_start=True,
        train_rollout_batch_size=8,
        val_rollout_batch_size=every,
        val_subset_size=subset,
        critic_warmup=0,
        max_consecutive_skipped_steps=5,
    )


def test_the_subset_is_whole_groups_below_a_whole_validation():
    with pytest.raises(
        ConfigError, match=r"val_subset_size=128 must be a multiple of val_env_manager\.group_size=1"
    ):
        compose(
            None, None, ["val_subset_size=128"]
        )  # the tiny recipe validates on 128 episodes: none left out
    with pytest.raises(
        ConfigError, match=r"val_subset_size=6 must be a multiple of val_env_manager\.group_size=4"
    ):
        compose(
            None,
            None,
            ["val_env_manager.num_env_groups=4", "val_env_manager.group_size=4", "val_subset_size=6"],
        )
    assert compose(None, None, ["val_subset_size=32"]).val_subset_size == 32


def test_only_the_validation_at_max_steps_plays_all_after_the_subset():
    assert [_loop(2).val_passes(step) for step in (0, 5, 10)] == [(2,), (2,), (2, 8)]
    assert [_loop(None).val_passes(step) for step in (0, 5, 10)] == [(8,), (8,), (8,)]


class _ValRollout:
    """Plays seed s as won when s - base is in `wins` (the current pass's set); records what it was asked."""

    layout = SimpleNamespace(group_size=1)

    def __init__(self) -> None:
        self.wins: set[int] = set()
        self.asked: list[list[int]] = []

    async def get_batch(self, count: int, seeds: list[int]) -> RolloutBatch:
        assert count == len(seeds)
        self.asked.append([s - validation_seeds(1)[0] for s in seeds])
        trajs = [
            Trajectory(env_id=i, group_id=i, episode_id=0, tag="Lake", seed=s, success=i in self.wins)
            for i, s in enumerate(seeds)
        ]
        return RolloutBatch(trajectories=trajs)


def _pipeline(loop: LoopSettings, rollout: _ValRollout) -> AgenticPipeline:
    """The pipeline's own `_validate` over a scripted validation rollout (no model, no envs)."""

    async def call(*_args: object) -> None:
        return None

    pipeline = AgenticPipeline.__new__(AgenticPipeline)
    pipeline.loop, pipeline.val_flips = loop, ValidationFlips()
    pipeline.parts = SimpleNamespace(
        val_rollout=rollout, renderer=None, policy_server=None, cluster=SimpleNamespace(call=call)
    )
    return pipeline


def test_the_curve_and_its_flips_stay_on_the_subset_and_the_end_is_measured_on_all():
    rollout = _ValRollout()
    pipeline = _pipeline(_loop(2, every=8), rollout)
    pipeline.step, rollout.wins = 5, {1}
    mid = asyncio.run(pipeline._validate())
    assert rollout.asked == [[0, 1]]
    assert (mid["val/episodes"], mid["val/env/Lake/success"]) == (2, 0.5)
    assert not any(k.startswith("val/subset/") for k in mid)
    # at max_steps: the subset (episode 0 now won as well), then all 8, of which 6 are won
    pipeline.step, rollout.wins = 10, {0, 1, 2, 3, 4, 5}
    end = asyncio.run(pipeline._validate())
    assert rollout.asked == [[0, 1], [0, 1], list(range(8))]
    assert (end["val/episodes"], end["val/env/Lake/success"], end["val/subset/env/Lake/success"]) == (
        8,
        0.75,
        1.0,
    )
    # the flips compare the subset's two passes: 1 episode won, none lost (not the 4 others won at the end)
    assert (end["val/flips/fail_to_success"], end["val/flips/success_to_fail"]) == (1.0, 0.0)


def test_the_final_report_compares_the_subset_and_names_the_whole(tmp_path, capsys):
    cfg = compose(None, None, ["val_subset_size=32"])
    mid = {"val/env/Lake/success": 0.25, "val/episodes": 32.0}
    end = {"val/env/Lake/success": 0.70, "val/subset/env/Lake/success": 0.75, "val/episodes": 128.0}
    print_final_report(cfg, RunSummary(tmp_path, 25, 60.0, val_history=[(5, mid), (25, end)]))
    assert (
        "[roll] validation success (greedy, the first 32 of 128 held-out seeds): step 5: 0.250 -> step 25: 0.750;"
        " all 128 at step 25: 0.700\n"
    ) in capsys.readouterr().out


def test_the_header_prints_the_baselines_of_the_subset_too(capsys):
    cfg = tiny_config().model_copy(update={"val_subset_size": 32})
    print_run_header(cfg)
    out = capsys.readouterr().out
    env = roll_envs.make("frozen_lake", render_mode=None)
    want = roll_envs.env_baselines(env, 8, seeds=validation_seeds(32)).success
    rates = ", ".join(f"{k} {v:.1%}" for k, v in want.items())
    assert "FrozenLake baselines on the 128 validation maps (seeds 1000000000-1000000127;" in out
    assert (
        "FrozenLake baselines on val_subset_size's first 32 validation maps (seeds 1000000000-1000000031;"
        in out
    )
    assert f"): {rates}." in out.split("val_subset_size's first 32")[1].splitlines()[0]
