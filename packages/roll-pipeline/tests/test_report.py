"""The baselines a run reports: `roll train`'s header per tag, `roll baselines --env`, and their plot lines."""

from __future__ import annotations

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.cli.args import EXAMPLES_DIR
from roll_pipeline.config.compose import compose, tiny_config
from roll_pipeline.observe.report import baseline_lines, print_run_header, tag_baselines

EXAMPLES = EXAMPLES_DIR / "tiny-cpu-agentic"


def test_the_default_run_prints_the_frozen_lake_line_as_before(capsys):
    print_run_header(tiny_config())
    assert (
        "[roll] FrozenLake baselines on held-out maps: random 19.4%, best_fixed_sequence 25.2%. At or below the"
        " fixed-sequence baseline the agent does not read the board.\n"
    ) in capsys.readouterr().out


def test_a_sokoban_run_prints_the_sokoban_baselines_only(capsys):
    cfg = compose(str(EXAMPLES), "agent_val_sokoban", [])
    print_run_header(cfg)
    out = capsys.readouterr().out
    assert "FrozenLake" not in out  # the defaults' FrozenLake entry stays in custom_envs, unplayed
    assert (
        "[roll] Sokoban baselines on held-out rooms: random 37.1%, optimal 100.0%. Shortest solutions (BFS)"
        " take 4.0 moves on average, at most 15; the cap is 30 turns.\n"
    ) in out
    assert baseline_lines(cfg) == pytest.approx(
        {"random baseline": 0.3712, "optimal baseline": 1.0}, abs=1e-4
    )


def test_a_multi_tag_run_reports_each_tag_at_its_own_cap(capsys):
    cfg = compose(str(EXAMPLES), "agent_val_multi_tag", ["custom_envs.Sokoban.max_actions_per_traj=10"])
    found = tag_baselines(cfg)
    assert list(found) == ["FrozenLake", "Sokoban"]
    assert (found["FrozenLake"].turns, found["Sokoban"].turns) == (8, 10)
    lines = baseline_lines(cfg)
    assert set(lines) == {
        "FrozenLake random baseline",
        "FrozenLake best_fixed_sequence baseline",
        "Sokoban random baseline",
        "Sokoban optimal baseline",
    }
    assert lines["Sokoban optimal baseline"] == 0.987  # 13 of 1000 rooms need more than 10 moves
    print_run_header(cfg.model_copy(update={"exp_name": "x"}))
    out = capsys.readouterr().out
    assert out.count("baselines on held-out") == 2


def test_a_tag_named_other_than_its_env_says_both(capsys):
    cfg = compose(
        None,
        None,
        [
            "train_env_manager.tags=[Boxes]",
            "val_env_manager.tags=[Boxes]",
            "+custom_envs.Boxes.env_type=larger_sokoban",
            "+custom_envs.Boxes.max_actions_per_traj=4",
        ],
    )
    print_run_header(cfg)
    assert "[roll] Boxes (Sokoban) baselines on held-out rooms: random" in capsys.readouterr().out


def test_roll_baselines_of_frozen_lake(capsys):
    assert cli.main(["baselines", "--env", "frozen_lake"]) == 0
    assert capsys.readouterr().out == f"{'random':>28}: 0.214\n{'best_fixed_sequence':>28}: 0.310\n"


def test_roll_baselines_names_no_env_by_default(capsys):
    """A generic command assumes no env: without --env it says which envs have baselines."""
    assert cli.main(["baselines"]) == 2
    err = capsys.readouterr().err
    assert "--env" in err and "frozen_lake" in err and "sokoban" in err


def test_roll_baselines_of_sokoban(capsys):
    assert cli.main(["baselines", "--env", "sokoban", "--max-steps", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in out] == [
        "random",
        "optimal",
        "optimal_moves_mean",
        "optimal_moves_max",
        "unsolvable",
    ]
    assert out[0].endswith("0.371") and out[1].endswith("1.000") and out[3].endswith(" 15")


def test_roll_baselines_of_an_env_without_any(capsys):
    assert cli.main(["baselines", "--env", "taxi"]) == 2
    assert "has no baselines" in capsys.readouterr().err
    assert cli.main(["baselines", "--env", "sokobn"]) == 2
    assert "sokoban" in capsys.readouterr().err  # did you mean


def test_a_validation_curve_gets_only_the_validation_tags_baselines():
    # trained on one fixed colour per tag (each tag's best fixed answer always wins), validated on drawn colours
    cfg = compose(str(EXAMPLES_DIR / "smollm2-cpu-agentic"), "agent_four_choice", [])
    assert cfg.val_env_manager.tags == ["FourChoice"] and len(cfg.train_env_manager.tags) == 4
    every = baseline_lines(cfg)
    assert every["Red best_fixed_answer baseline"] == 1.0 and len(every) == 10
    validation = baseline_lines(cfg, validation_only=True)
    assert set(validation) == {"random baseline", "best_fixed_answer baseline"}
    assert validation["random baseline"] == 0.25 and 0.25 <= validation["best_fixed_answer baseline"] < 0.3
