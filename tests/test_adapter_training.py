"""An env library's env trains through the one documented command (`uv run roll train ...`, docs/envs/textarena.md):
2 steps of TextArena's GuessTheNumber on the builtin tiny model, every turn reaching the library's own env."""

from __future__ import annotations

import json

import pytest
from roll_pipeline import cli

pytest.importorskip("textarena", reason="needs roll-envs[textarena] (installed by the workspace dev group)")

pytestmark = pytest.mark.adapters


def test_a_textarena_env_trains_two_steps_from_the_command_line(tmp_path):
    argv = [
        "train",
        "max_steps=2",
        "eval_steps=2",
        "save_steps=2",
        f"output_dir={tmp_path}",
        "exp_name=textarena_guess",
        "custom_envs.FrozenLake.env_type=textarena:GuessTheNumber-v0",
        "custom_envs.FrozenLake.max_actions_per_traj=3",
        "train_env_manager.num_env_groups=2",
        "train_env_manager.group_size=2",
        "val_env_manager.num_env_groups=4",
        "cluster.backend=local",
        "--no-progress",
    ]
    assert cli.main(argv) == 0
    rows = [
        json.loads(line) for line in (tmp_path / "textarena_guess" / "metrics.jsonl").read_text().splitlines()
    ]
    trained = [r for r in rows if "actor/pg_loss" in r]
    assert [r["step"] for r in trained] == [1, 2]
    # the library's env played: GuessTheNumber answers every turn, so each episode ran its turns or ended
    assert all(r["tokens/response_length/mean"] > 0 for r in trained)
    assert (tmp_path / "textarena_guess" / "checkpoints" / "checkpoint-2").is_dir()
