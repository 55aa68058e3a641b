"""Two players end to end: the tiny model plays TicTacToe against itself for 2 training steps (each seat's
turns train as trajectories of their own) and is validated as X against the env's random player; seats that
do not fit the env are refused by `roll config` before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from roll_pipeline.config.compose import ConfigError
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.preflight import compose
from small_runs import TWO_GROUPS_ONE_WORKER, run_to_end, steps

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny-cpu-agentic"
SMALL = [*steps(2), "cluster.backend=local", *TWO_GROUPS_ONE_WORKER]


def test_self_play_trains_and_validates_against_a_fixed_player(tmp_path):
    config = compose(str(EXAMPLE), "agent_tictactoe_selfplay", [*SMALL, f"output_dir={tmp_path}"])
    run_to_end(config)
    rows = read_metrics(tmp_path / config.exp_name)
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
