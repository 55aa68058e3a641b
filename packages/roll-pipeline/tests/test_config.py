from __future__ import annotations

from pathlib import Path

import pytest
from roll_pipeline.config.compose import ConfigError, compose, parse_args, tiny_config, validate
from roll_pipeline.config.schema import AgenticConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_defaults_are_for_a_pretrained_instruct_model():
    cfg = AgenticConfig(pretrain="some/model")
    assert cfg.custom_envs["FrozenLake"].env_instruction is None  # the env's own instruction
    assert (cfg.kl_penalty, cfg.kl_loss_coef, cfg.skip_confident_tokens) == ("k3", 0.01, None)
    assert cfg.actor_train.training_args.learning_rate == 1e-6
    assert cfg.custom_envs["FrozenLake"].max_tokens_per_step == 128
    assert cfg.actor_infer.generating_args.max_new_tokens == 128
    assert cfg.actor_infer.generating_args.stop_strings == ["</answer>"]
    assert cfg.train_env_manager.tags == ["FrozenLake"]
    assert cfg.train_rollout_batch_size == cfg.train_env_manager.num_groups_partition[0] * 8
    assert cfg.cluster.backend == "ray"


def test_pretrain_has_no_default_and_says_how_to_set_it():
    with pytest.raises(ConfigError, match="pretrain is not set: name a model folder, a hub id"):
        validate({})
    with pytest.raises(ConfigError, match="pretrain is not set"):
        compose(str(EXAMPLES / "tiny-cpu-agentic"), "agent_val_frozen_lake", ["pretrain=null"])


def test_no_config_file_is_the_tiny_recipe_and_a_real_model_gets_the_defaults():
    tiny = compose(None, None, [])
    assert tiny == tiny_config()
    assert tiny.pretrain == "builtin:tiny-frozen-lake-sighted"
    assert (tiny.kl_penalty, tiny.kl_loss_coef, tiny.skip_confident_tokens) == ("full_forward", 1.0, 0.99)
    assert tiny.custom_envs["FrozenLake"].env_instruction == ""
    assert tiny.actor_train.training_args.learning_rate == 1e-3
    # the example YAML of the same run states the same config
    assert compose(str(EXAMPLES / "tiny-cpu-agentic"), "agent_val_frozen_lake", []) == tiny
    real = compose(None, None, ["pretrain=/models/my-instruct-model"])
    assert real == AgenticConfig(pretrain="/models/my-instruct-model")
    assert compose(None, None, ["pretrain=builtin:tiny-sokoban"]).kl_penalty == "full_forward"


def test_unknown_key_names_the_field_and_suggests():
    with pytest.raises(ConfigError) as err:
        validate({"exp_nam": "x", "actor_train": {"training_args": {"learning_rat": 1.0}}})
    text = str(err.value)
    assert "unknown key 'exp_nam'" in text and "did you mean 'exp_name'" in text
    assert "actor_train.training_args.learning_rat" in text and "'learning_rate'" in text


def test_unknown_key_inside_a_custom_env():
    with pytest.raises(ConfigError, match="did you mean 'env_type'"):
        validate({"custom_envs": {"FrozenLake": {"env_typ": "frozen_lake"}}})


def test_bad_values_and_cross_field_checks():
    with pytest.raises(ConfigError, match="max_steps"):
        validate({"max_steps": -1})
    with pytest.raises(ConfigError, match="no entry in custom_envs"):
        validate({"train_env_manager": {"tags": ["Sokoban"]}})
    with pytest.raises(ConfigError, match="multiple of"):
        validate({"rollout_batch_size": 12})
    with pytest.raises(ConfigError, match="num_groups_partition"):
        validate({"train_env_manager": {"num_env_groups": 4, "num_groups_partition": [3]}})
    with pytest.raises(ConfigError, match="skip_confident_tokens"):
        validate({"skip_confident_tokens": 1.5})  # a probability
    with pytest.raises(ConfigError, match="lr_scheduler_type"):
        validate({"actor_train": {"training_args": {"lr_scheduler_type": "step"}}})
    with pytest.raises(ConfigError, match="min_lr_ratio"):
        validate({"actor_train": {"training_args": {"min_lr_ratio": 2.0}}})


def test_compose_defaults_with_overrides():
    cfg = compose(None, None, ["exp_name=my_run", "seed=123", "actor_train.training_args.learning_rate=0.5"])
    assert (cfg.exp_name, cfg.seed, cfg.actor_train.training_args.learning_rate) == ("my_run", 123, 0.5)


def test_compose_example_yaml_with_both_flag_spellings():
    for argv in (
        ["--config_path", "tiny-cpu-agentic", "--config_name", "agent_val_frozen_lake", "seed=7"],
        ["--config-path", "tiny-cpu-agentic", "--config-name", "agent_val_frozen_lake", "seed=7"],
    ):
        args = parse_args(argv)
        cfg = compose(args.config_path, args.config_name, args.overrides, search_from=EXAMPLES)
        assert cfg.seed == 7 and cfg.exp_name == "frozen_lake_tiny"


def test_every_example_config_validates():
    configs = sorted(EXAMPLES.glob("*/*.yaml"))
    assert configs
    for path in configs:
        cfg = compose(str(path.parent), path.stem, [])
        assert cfg.max_steps > 0, path


def test_compose_errors_are_config_errors():
    with pytest.raises(ConfigError, match="not found"):
        compose("no/such/folder", "x", [])
    with pytest.raises(ConfigError):
        compose(None, None, ["exp_nam=x"])
    with pytest.raises(ConfigError, match="needs --config-name"):
        compose(str(EXAMPLES / "tiny-cpu-agentic"), None, [])


def test_generated_field_docs_are_current():
    import subprocess
    import sys

    root = EXAMPLES.parent
    out = subprocess.run(
        [sys.executable, str(root / "tools" / "gen_config_docs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == (root / "docs" / "config_fields.md").read_text(), (
        "docs/config_fields.md is stale: run `uv run python tools/gen_config_docs.py > docs/config_fields.md`"
    )


def test_every_config_field_is_described():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", EXAMPLES.parent / "tools" / "gen_config_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for model in gen.MODELS:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_an_unknown_override_key_names_the_nearest_valid_key():
    for override, hint in [
        ("exp_nam=x", "'exp_name'"),
        ("actor_train.training_args.learning_rat=1", "'learning_rate'"),
        ("+custom_envs.Big.env_typ=frozen_lake", "'env_type'"),
        ("critic.use_sequence_pack=true", "'use_sequence_packing'"),
    ]:
        with pytest.raises(ConfigError) as err:
            compose(None, None, [override])
        assert "unknown key" in str(err.value) and f"did you mean {hint}" in str(err.value), override
    # keys below free-form mappings are left to the env's own config check
    compose(None, None, ["+custom_envs.FrozenLake.env_config.size=5"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"render_episodes_per_tag": 3}, "set render_save_dir"),
        ({"critic_warmup": 5}, "only adv_estimator=gae"),
        ({"lambd": 0.9}, "only adv_estimator=gae"),
        ({"kl_horizon": 100}, "set target_kl"),
        ({"target_kl": 0.1, "use_kl_loss": False}, "no KL term"),
        ({"use_kl_loss": False, "kl_loss_coef": 0.2}, "use_kl_loss=false"),
        ({"kl_reference": "rl_start", "use_kl_loss": False}, "kl_reference=rl_start sets the weights"),
        ({"pg_clip": 0.3, "pg_clip_low": 0.1, "pg_clip_high": 0.2}, "override it on both sides"),
        ({"sample_shape": "trajectory"}, "max_history_turns: null"),
        ({"tis_cap": 2.0}, "recompute_old_log_probs"),
        ({"skip_confident_by": "reference", "use_kl_loss": False}, "skip_confident_by=reference"),
        ({"skip_confident_by": "reference", "skip_confident_tokens": None}, "skip_confident_by=reference"),
        ({"entropy_scope": "decision"}, "entropy_scope=decision"),
        ({"entropy_scope": "turn_max"}, "entropy_scope=turn_max"),
        ({"actor_infer": {"generating_args": {"temperature": 1.5}}}, "recompute_old_log_probs=true"),
        ({"actor_infer": {"generating_args": {"top_p": 0.9}}}, "recompute_old_log_probs=true"),
        (
            {"actor_infer": {"generating_args": {"temperature_schedule": [[160, 1.5]]}}},
            "recompute_old_log_probs=true",
        ),
        (
            {"entropy_scope": "decision", "entropy_loss_coef": 0.01, "skip_confident_tokens": None},
            "entropy_scope",
        ),
    ],
)
def test_settings_that_would_do_nothing_are_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(overrides)


def test_demonstration_env_manager_is_checked_and_defaults_to_the_training_envs():
    model = {"pretrain": "builtin:tiny-frozen-lake"}
    one_each = {"num_env_groups": 128, "group_size": 1, "tags": ["FrozenLake"]}
    assert (
        validate({**model, "demonstration_steps": 2}).demonstration_envs.group_size == 8
    )  # train_env_manager's
    cfg = validate({**model, "demonstration_steps": 2, "demonstration_env_manager": one_each})
    assert cfg.demonstration_envs.num_env_groups == 128 and cfg.train_env_manager.num_env_groups == 16
    with pytest.raises(ConfigError, match="demonstration_steps is 0: nothing plays it"):
        validate({**model, "demonstration_env_manager": one_each})
    with pytest.raises(ConfigError, match=r"multiple of demonstration_env_manager\.group_size=3"):
        validate(
            {**model, "demonstration_steps": 2, "demonstration_env_manager": {**one_each, "group_size": 3}}
        )
    with pytest.raises(ConfigError, match=r"demonstration_env_manager.tags \['Lake'\] have no entry"):
        validate(
            {**model, "demonstration_steps": 2, "demonstration_env_manager": {**one_each, "tags": ["Lake"]}}
        )


def test_a_reference_at_the_rl_start_is_accepted_with_every_kl_estimator_and_without_cloning():
    """Without demonstration steps the RL start is the start weights: accepted, as with either kind of
    reference (the frozen copy in the trainer, a reference worker)."""
    for kl_penalty in ("full_forward", "k3"):
        cfg = tiny_config(kl_reference="rl_start", kl_penalty=kl_penalty)
        assert (cfg.kl_reference, cfg.demonstration_steps, cfg.uses_reference) == ("rl_start", 0, True)
    assert tiny_config(kl_reference="rl_start", use_kl_loss=False, init_kl_coef=0.1).uses_reference


def test_roles_reject_settings_they_never_read():
    with pytest.raises(ConfigError, match=r"reference.training_args is set, but it is never trained"):
        compose(None, None, ["reference.training_args.learning_rate=0.1"])
    with pytest.raises(ConfigError, match=r"actor_train.generating_args is set, but it samples nothing"):
        compose(None, None, ["actor_train.generating_args.top_k=5"])
    with pytest.raises(ConfigError, match=r"actor_infer.use_sequence_packing is set"):
        compose(None, None, ["actor_infer.use_sequence_packing=true"])
    assert compose(
        None, None, ["cluster.backend=local", "actor_train.device_mapping=[1]"]
    ).actor_train.device_mapping == [1]


def test_sample_shape_auto_follows_the_history():
    assert tiny_config().train_sample_shape == "step"
    full = compose(None, None, ["custom_envs.FrozenLake.max_history_turns=null"])
    assert full.train_sample_shape == "trajectory"
    assert (
        compose(
            None, None, ["custom_envs.FrozenLake.max_history_turns=null", "sample_shape=step"]
        ).train_sample_shape
        == "step"
    )


@pytest.mark.parametrize("name", ["agent_val_sokoban", "agent_val_multi_tag"])
def test_sokoban_examples_prompt_as_their_builtin_model_warmed_up(name):
    """Each tag's system prompt is the one the builtin model's warm-up used for that env (none)."""
    from roll_envs import sokoban_baselines
    from roll_pipeline.models.recipes import BUILTIN_MODELS, NO_INSTRUCTION

    cfg = compose(str(EXAMPLES / "tiny-cpu-agentic"), name, [])
    warmed = {w.env_type: w.instruction for w in BUILTIN_MODELS[cfg.pretrain.removeprefix("builtin:")].envs}
    tags = cfg.train_env_manager.tags
    assert cfg.val_env_manager.tags == tags and "Sokoban" in tags
    for tag in tags:
        env = cfg.custom_envs[tag]
        assert env.env_instruction == warmed[env.env_type], tag
    sokoban = cfg.custom_envs["Sokoban"]
    assert sokoban.env_instruction == NO_INSTRUCTION and sokoban.env_type == "sokoban"
    # the turn cap: twice the longest shortest solution of the held-out rooms
    assert sokoban.max_actions_per_traj == 2 * sokoban_baselines(1000, 30)["optimal_moves_max"]
    if name == "agent_val_multi_tag":
        assert tags == ["FrozenLake", "Sokoban"]
        assert cfg.train_env_manager.num_groups_partition == [8, 8]
        assert cfg.val_env_manager.num_groups_partition == [64, 64]


def test_temperature_schedule_is_piecewise_constant_from_the_command_line():
    cfg = compose(
        None,
        None,
        [
            "recompute_old_log_probs=true",
            "actor_infer.generating_args.temperature_schedule=[[100,1.5],[200,1.2]]",
        ],
    )
    gen = cfg.actor_infer.generating_args
    assert [gen.temperature_at(s) for s in (0, 99, 100, 199, 200, 500)] == [1.0, 1.0, 1.5, 1.5, 1.2, 1.2]
    assert gen.reshapes_sampling()
    assert not tiny_config().actor_infer.generating_args.reshapes_sampling()


@pytest.mark.parametrize(
    "schedule", [[[200, 1.5], [100, 1.2]], [[5, 1.5], [5, 1.2]], [[-1, 1.5]], [[10, 0.0]]]
)
def test_bad_temperature_schedules_are_named(schedule):
    with pytest.raises(ConfigError, match="temperature_schedule"):
        validate(
            {
                "recompute_old_log_probs": True,
                "actor_infer": {"generating_args": {"temperature_schedule": schedule}},
            }
        )


def test_reference_placement_under_the_exact_kl_is_refused_with_the_fix():
    """With kl_penalty full/full_forward the reference is a frozen copy inside actor_train: a device mapping or
    batch size of its own would do nothing."""
    with pytest.raises(ConfigError) as err:
        compose(
            None, None, ["reference.device_mapping=[1]", "reference.num_threads=2"]
        )  # the tiny recipe: full_forward
    text = str(err.value)
    assert "reference.device_mapping is set, but with kl_penalty=full_forward" in text
    assert "reference.num_threads is set" in text and "use kl_penalty=k3" in text
    assert compose(
        None, None, ["reference.device_mapping=[1]", "kl_penalty=k3"]
    ).reference.device_mapping == [1]
    assert compose(None, None, ["reference.device_mapping=[1]", "use_kl_loss=false"])  # no reference at all
    assert (
        compose(None, None, []).reference.infer_batch_size == 128
    )  # the recipe's own value is not the user's


def test_an_antlr_runtime_other_than_hydras_is_a_config_error_with_the_fix(monkeypatch):
    import importlib.metadata

    from roll_pipeline.config.compose import ConfigError, compose

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "4.13.2" if name == "antlr4-python3-runtime" else real(name),
    )
    with pytest.raises(ConfigError, match=r"antlr4-python3-runtime 4\.13\.2 .* needs 4\.9\.x.*==4\.9\.3"):
        compose(None, None, ["max_steps=1"])
    monkeypatch.setattr(importlib.metadata, "version", real)
    assert compose(None, None, ["max_steps=1"]).max_steps == 1  # the workspace's own runtime is Hydra's


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["+tracker_kwargs.log_dir=./tb"],
            r"tracker_kwargs \['log_dir'\] only reach W&B .* Add wandb to track_with",
        ),
        (
            ["custom_envs.FrozenLake.max_tokens_per_step=64"],  # the tiny recipe samples at most 16 tokens
            r"max_tokens_per_step=64 is above actor_infer.generating_args.max_new_tokens=16.* raise max_new_tokens",
        ),
    ],
)
def test_settings_that_would_not_be_honoured_are_refused_with_the_fix(overrides, expected):
    from roll_pipeline.config.compose import ConfigError, compose

    with pytest.raises(ConfigError, match=expected):
        compose(None, None, overrides)


def test_honoured_settings_pass():
    from roll_pipeline.config.compose import compose

    ok = compose(None, None, ["+tracker_kwargs.project=p", "track_with=[stdout,wandb]"])
    assert ok.tracker_kwargs == {"project": "p"}
    raised = compose(
        None,
        None,
        ["custom_envs.FrozenLake.max_tokens_per_step=64", "actor_infer.generating_args.max_new_tokens=64"],
    )
    assert raised.custom_envs["FrozenLake"].max_tokens_per_step == 64
    # a tag left at the schema's default budget (128) under the tiny recipe's 16-token sampler is not an error
    assert (
        compose(None, None, ["+custom_envs.Other.env_type=frozen_lake"])
        .custom_envs["Other"]
        .max_tokens_per_step
        == 128
    )
