"""Two players end to end: the tiny model plays TicTacToe against itself for 2 training steps (each seat's
turns train as trajectories of their own) and is validated as X against the env's random player; seats that
do not fit the env are refused by `roll config` before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline import AgenticPipeline
from roll_pipeline.config.compose import ConfigError
from roll_pipeline.preflight import compose

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny-cpu-agentic"
SMALL = [
    "max_steps=2",
    "save_steps=2",
    "eval_steps=2",
    "cluster.backend=local",
    "train_env_manager.num_env_groups=2",
    "train_env_manager.group_size=4",
    "train_env_manager.max_env_num_per_worker=8",
    "val_env_manager.num_env_groups=8",
    "val_env_manager.max_env_num_per_worker=8",
    "actor_train.training_args.per_device_train_batch_size=16",
]


def test_self_play_trains_and_validates_against_a_fixed_player(tmp_path):
    config = compose(str(EXAMPLE), "agent_tictactoe_selfplay", [*SMALL, f"output_dir={tmp_path}"])
    pipeline = AgenticPipeline(config, progress=False)
    try:
        pipeline.run()
    finally:
        pipeline.close()
    rows = [
        json.loads(line) for line in (tmp_path / config.exp_name / "metrics.jsonl").read_text().splitlines()
    ]
    trained = [r for r in rows if "env/TicTacToe/success" in r]
    assert [r["step"] for r in trained] == [1, 2]
    for row in trained:  # a seat's trajectory holds its own moves: about half a game's
        assert 1 <= row["env/TicTacToe/num_actions"] <= 10
        assert row["env/TicTacToe/failed_episodes"] == 0
    validated = [r for r in rows if "val/env/TicTacToeVsRandom/success" in r]
    assert [r["step"] for r in validated] == [0, 2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "custom_envs.TicTacToeVsRandom.fixed_players.O=champion",
            r"offers the fixed policies \['random', 'minimax'\]",
        ),
        ("+custom_envs.TicTacToeVsRandom.fixed_players.Z=random", r"names seat 'Z'"),
        ("+custom_envs.TicTacToeVsRandom.fixed_players.X=minimax", r"every seat"),
    ],
)
def test_fixed_players_that_do_not_fit_the_env_are_refused_by_roll_config(override, message):
    with pytest.raises(ConfigError, match=message):
        compose(str(EXAMPLE), "agent_tictactoe_selfplay", [override], preflight=True)
