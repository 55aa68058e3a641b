"""End to end: the Sokoban and the multi-tag (FrozenLake + Sokoban) example configs train for two steps with
their builtin models, `roll train` prints each tag's baselines, every tag gets its own train and validation
curves (metrics.jsonl, TensorBoard), and `roll plot` draws them with the tags' baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from small_runs import SMALL_BATCHES, steps

CONFIGS = ["--config-path", "tiny-cpu-agentic", "--no-progress"]
SMALL = [
    *steps(2),
    *SMALL_BATCHES,
    "cluster.backend=local",
    "train_env_manager.max_env_num_per_worker=8",
    "val_env_manager.max_env_num_per_worker=8",
    "custom_envs.Sokoban.max_actions_per_traj=6",
]
RUNS = {
    "agent_val_sokoban": ["train_env_manager.num_env_groups=2", "val_env_manager.num_env_groups=4"],
    "agent_val_multi_tag": [
        "train_env_manager.num_env_groups=2",
        "train_env_manager.num_groups_partition=[1,1]",
        "val_env_manager.num_env_groups=4",
        "val_env_manager.num_groups_partition=[2,2]",
        "custom_envs.FrozenLake.max_actions_per_traj=4",
    ],
}
TAGS = {"agent_val_sokoban": ["Sokoban"], "agent_val_multi_tag": ["FrozenLake", "Sokoban"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_two_steps_of_the_example_config(name, tmp_path: Path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = [
        "train",
        *CONFIGS,
        "--config-name",
        name,
        *SMALL,
        *RUNS[name],
        f"output_dir={tmp_path}",
        "exp_name=e2e",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "[roll] Sokoban baselines on the " in out and " validation rooms (seeds 1000000" in out
    assert "the cap is 6 turns" in out
    assert ("[roll] FrozenLake baselines" in out) == ("FrozenLake" in TAGS[name])
    run_dir = tmp_path / "e2e"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    for tag in TAGS[name]:
        assert f"val/env/{tag}/success" in rows[0] and f"val/env/{tag}/success" in rows[-1], tag
        assert all(f"env/{tag}/success" in r for r in rows[1:]), tag
        assert {f"env/{tag}/success", f"val/env/{tag}/success"} <= scalars, tag
    assert cli.main(["plot", str(run_dir)]) == 0
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    lines = cli._run_baselines(run_dir)
    # FrozenLake: random and the best fixed sequence; Sokoban: those, push_rule and optimal
    assert lines is not None and len(lines) == sum({"FrozenLake": 2, "Sokoban": 4}[tag] for tag in TAGS[name])
