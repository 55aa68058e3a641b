"""The baselines a run reports: `roll train`'s header per tag, `roll baselines` (of a config or `--env`), and
their plot lines; a validation tag's are scored on exactly its validation seeds."""

from __future__ import annotations

import random

import numpy as np
import pytest
import roll_envs
from roll_envs.envs.frozen_lake import generate_map
from roll_pipeline.cli import commands as cli
from roll_pipeline.cli.args import EXAMPLES_DIR
from roll_pipeline.config.compose import compose, tiny_config
from roll_pipeline.observe.report import (
    baseline_lines,
    print_run_header,
    tag_baselines,
    validation_seeds_by_tag,
)
from roll_rollout import validation_seeds

EXAMPLES = EXAMPLES_DIR / "tiny-cpu-agentic"


def test_the_default_run_prints_the_frozen_lake_line_on_its_validation_maps(capsys):
    cfg = tiny_config()
    print_run_header(cfg)
    assert (
        "[roll] FrozenLake baselines on the 128 validation maps (seeds 1000000000-1000000127; 3 of them also"
        " among the first 2,000 training maps): random 19.9%, best_fixed_sequence 36.7%. Below the fixed"
        " sequence (the best on these maps) the agent does not read the board.\n"
    ) in capsys.readouterr().out
    env = roll_envs.make("frozen_lake", render_mode=None)
    on_validation = roll_envs.env_baselines(env, 8, seeds=validation_seeds(cfg.val_rollout_batch_size))
    assert baseline_lines(cfg) == {f"{k} baseline": v for k, v in on_validation.success.items()}


def test_validation_maps_that_training_also_plays_are_counted():
    """Against the boards themselves: the default run's first 2,000 training seeds (drawn as its scheduler
    draws them, from `random.Random(seed)`) play 3 of its 128 validation maps."""
    cfg = tiny_config()
    draw = random.Random(cfg.seed)
    trained = {tuple(generate_map(np.random.default_rng(draw.randrange(10**9)))) for _ in range(2000)}
    validated = [tuple(generate_map(np.random.default_rng(s))) for s in validation_seeds(128)]
    shared = sum(board in trained for board in validated)
    assert tag_baselines(cfg)["FrozenLake"].in_training == (shared, 2000) == (3, 2000)


def test_a_described_run_prints_the_description_rule(capsys):
    cfg = compose(str(EXAMPLES_DIR / "smollm2-cpu-agentic"), "agent_frozen_lake_demo", [])
    print_run_header(cfg)
    assert (
        "random 21.8%, best_fixed_sequence 39.8%, description_rule 96.9%. Below the fixed sequence (the best on"
        " these maps) the agent does not read the board. description_rule: onto the goal if next to you, else"
        " towards it onto ice.\n"
    ) in capsys.readouterr().out


def test_a_sokoban_run_prints_the_sokoban_baselines_only(capsys):
    cfg = compose(str(EXAMPLES), "agent_val_sokoban", [])
    print_run_header(cfg)
    out = capsys.readouterr().out
    assert "FrozenLake" not in out  # the defaults' FrozenLake entry stays in custom_envs, unplayed
    assert (
        "[roll] Sokoban baselines on the 128 validation rooms (seeds 1000000000-1000000127; 6 of them also among"
        " the first 2,000 training rooms): random 34.9%, best_fixed_10_moves 35.2%, push_rule 96.9%, optimal 100.0%."
        " Shortest solutions (BFS) take 4.3 moves on average, at most 13; the cap is 30 turns."
    ) in out
    assert baseline_lines(cfg) == pytest.approx(
        {
            "random baseline": 0.3489,
            "best_fixed_10_moves baseline": 0.3516,
            "push_rule baseline": 0.9688,
            "optimal baseline": 1.0,
        },
        abs=1e-4,
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
        "Sokoban best_fixed_sequence baseline",
        "Sokoban push_rule baseline",
        "Sokoban optimal baseline",
    }
    # 128 validation groups split 64/64 (num_groups_partition), in tag order, as the validation scheduler does
    assert validation_seeds_by_tag(cfg) == {
        "FrozenLake": tuple(validation_seeds(64)),
        "Sokoban": tuple(validation_seeds(128)[64:]),
    }
    # 3 of Sokoban's 64 validation rooms need more than 10 moves
    assert lines["Sokoban optimal baseline"] == 61 / 64
    print_run_header(cfg.model_copy(update={"exp_name": "x"}))
    out = capsys.readouterr().out
    assert out.count("baselines on the 64 validation") == 2
    assert "Sokoban baselines on the 64 validation rooms (seeds 1000000064-1000000127; 2 of them also" in out


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
    assert "[roll] Boxes (Sokoban) baselines on the 128 validation rooms (seeds" in capsys.readouterr().out


def test_roll_baselines_of_frozen_lake(capsys):
    assert cli.main(["baselines", "--env", "frozen_lake"]) == 0
    assert capsys.readouterr().out == f"{'random':>28}: 0.214\n{'best_fixed_sequence':>28}: 0.313\n"


def test_roll_baselines_names_no_env_by_default(capsys):
    """A generic command assumes no env: without --env it says which envs have baselines."""
    assert cli.main(["baselines"]) == 2
    err = capsys.readouterr().err
    assert "--env" in err and "frozen_lake" in err and "sokoban" in err


def test_roll_baselines_of_sokoban(capsys):
    assert cli.main(["baselines", "--env", "sokoban", "--max-steps", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in out][:7] == [
        "random",
        "best_fixed_10_moves",
        "push_rule",
        "optimal",
        "optimal_moves_mean",
        "optimal_moves_max",
        "unsolvable",
    ]
    assert out[0].endswith("0.371") and out[2].endswith("0.989") and out[3].endswith("1.000")
    assert out[5].endswith(" 15")


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


def test_four_choice_baselines_are_those_of_its_64_validation_seeds(capsys):
    """four_choice validates on 64 seeds that show its 4 prompts: the best fixed answer there is 19/64, not the
    0.267 of the 1000 default seeds, and the header says how few prompts those episodes show."""
    cfg = compose(str(EXAMPLES_DIR / "smollm2-cpu-agentic"), "agent_four_choice", [])
    assert validation_seeds_by_tag(cfg) == {"FourChoice": tuple(validation_seeds(64))}
    found = tag_baselines(cfg, validation_only=True)["FourChoice"]
    assert found.success == {"random": 0.25, "best_fixed_answer": 19 / 64}
    assert found.seeds == tuple(validation_seeds(64)) and found.observations == 4
    print_run_header(cfg)
    out = capsys.readouterr().out
    assert (
        "[roll] FourChoice baselines on the 64 validation episodes (seeds 1000000000-1000000063; 4 distinct first"
        " observations; 64 of them also among the first 2,000 training episodes): random 25.0%,"
        " best_fixed_answer 29.7%."
    ) in out
    assert "[roll] Red (FourChoice) baselines on 1000 episodes (a training tag, not validated: seeds" in out


def test_validation_groups_of_several_episodes_play_one_seed_each():
    cfg = compose(None, None, ["val_env_manager.num_env_groups=8", "val_env_manager.group_size=4"])
    assert cfg.val_rollout_batch_size == 32
    assert validation_seeds_by_tag(cfg) == {"FrozenLake": tuple(validation_seeds(8))}
    assert tag_baselines(cfg)["FrozenLake"].seeds == tuple(validation_seeds(8))


def test_roll_baselines_of_a_config_scores_its_validation_seeds(capsys):
    args = ["baselines", "--config-path", "smollm2-cpu-agentic", "--config-name", "agent_four_choice"]
    assert cli.main(args) == 0
    assert capsys.readouterr().out == (
        "FourChoice at 1 turn, on the 64 validation episodes (seeds 1000000000-1000000063; 4 distinct first"
        " observations; 64 of them also among the first 2,000 training episodes):"
        f"\n{'random':>28}: 0.250\n{'best_fixed_answer':>28}: 0.297\n"
        "At or below best_fixed_answer the agent does not read the colour.\n"
    )


def test_roll_baselines_of_four_choice_says_how_few_observations(capsys):
    assert cli.main(["baselines", "--env", "four_choice"]) == 0
    assert capsys.readouterr().out == (
        f"{'random':>28}: 0.250\n{'best_fixed_answer':>28}: 0.267\n"
        f"{'distinct_observations':>28}: 4 (in 1000 episodes)\n"
    )


def test_the_header_names_the_cloning_steps_and_their_own_layout(capsys):
    cloning = ["demonstration_steps=3", "print_baselines=false"]
    print_run_header(compose(None, None, cloning))
    assert "400 steps (the first 3 cloning the envs' demonstrations) of 128 trajectories (16 groups x 8)" in (
        capsys.readouterr().out
    )
    own = "+demonstration_env_manager={num_env_groups: 128, group_size: 1}"
    print_run_header(compose(None, None, [*cloning, own]))
    assert "(the first 3 cloning the envs' demonstrations, 128 groups x 1) of 128 trajectories" in (
        capsys.readouterr().out
    )
