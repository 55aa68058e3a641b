"""Frames and GIFs, the roll-envs command line, metric aggregation and the docstring examples."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pytest
import roll_envs
from PIL import Image
from roll_envs import cli
from roll_envs.metrics import aggregate_metrics


@pytest.mark.parametrize("env_id", ["frozen_lake", "sokoban", "larger_sokoban", "webshop_lite", "taxi"])
def test_rgb_frames(env_id):
    env = roll_envs.make(env_id, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert (
        isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.shape[2] == 3 and frame.size > 0
    )


def test_replay_to_gif(tmp_path):
    env = roll_envs.make("frozen_lake")
    path = roll_envs.replay_to_gif(
        env, 0, ["<answer>Left</answer>", "<answer>Down</answer>", "bad"], tmp_path / "a.gif"
    )
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames >= 2
    with pytest.raises(ValueError, match="at least one frame"):
        roll_envs.save_gif([], tmp_path / "empty.gif")


def test_metric_aggregation():
    steps = [{"a": 1.0, "b": 2.0, "c": 5.0}, {"a": 0.0, "b": 4.0, "c": 1.0}]
    agg = aggregate_metrics(steps, {"a": "mean", "b": "sum", "c": "last"})
    assert agg == {"a": 0.5, "b": 6.0, "c": 1.0}
    assert aggregate_metrics(steps, {"c": "max"})["c"] == 5.0
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_metrics(steps, {"a": "median"})
    assert roll_envs.SokobanEnv.metric_aggregation["boxes_on_target"] == "last"


def test_cli_list_and_check(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "frozen_lake" in out and "webshop_lite" in out
    assert {"gem:*", "textarena:*", "reasoning_gym:*"} <= {line.split()[0] for line in out.splitlines()}
    assert cli.main(["check", "roll_envs.envs.frozen_lake:FrozenLakeEnv", "--set", "size=5"]) == 0
    assert "passes every check" in capsys.readouterr().out
    assert cli.main(["check", "frozen_lak"]) == 1
    assert "Did you mean 'frozen_lake'" in capsys.readouterr().err
    assert cli.main(["check", "roll_envs.nowhere:Env"]) == 1


def test_cli_play_loop():
    lines = iter(["right", "<answer>Down</answer>", ":q"])
    shown: list[str] = []
    env = roll_envs.make("frozen_lake")
    cli.play(env, 0, read=lambda prompt: next(lines), write=shown.append)
    text = "\n".join(shown)
    assert "instruction" in text and "reward" in text and '"action_is_valid": true' in text
    assert cli.parse_settings(["size=5", "is_slippery=true", "name=abc"]) == {
        "size": 5,
        "is_slippery": True,
        "name": "abc",
    }


def test_docstring_examples():
    failures = 0
    for info in pkgutil.walk_packages(roll_envs.__path__, prefix="roll_envs."):
        module = importlib.import_module(info.name)
        failures += doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed
    assert failures == 0
