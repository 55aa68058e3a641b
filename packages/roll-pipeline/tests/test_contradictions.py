"""Settings that work against each other (`config.contradictions`): each is warned with its fix, `roll config`
prints the warnings and goes on, and a config without the contradiction has none."""

from __future__ import annotations

from roll_pipeline.cli import commands as cli
from roll_pipeline.config.compose import compose
from roll_pipeline.config.contradictions import answer_formats, config_warnings

BF16_ASYNC = ["actor_infer.model_args.dtype=bfloat16", "async_generation_ratio=1"]


def test_the_defaults_and_the_tiny_recipe_have_no_contradiction():
    assert config_warnings(compose(None, None, [])) == []
    assert config_warnings(compose(None, None, ["pretrain=Org/Model"])) == []


def test_bf16_sampling_asynchronous_without_recompute_is_warned_with_the_fix():
    (warning,) = config_warnings(compose(None, None, BF16_ASYNC))
    assert (
        "actor_infer samples in bfloat16 with async_generation_ratio=1 and recompute_old_log_probs=false"
        in warning
    )
    assert "set recompute_old_log_probs=true" in warning
    (warning,) = config_warnings(compose(None, None, ["actor_infer.model_args.dtype=float16"]))
    assert "float16" in warning


def test_bf16_sampling_with_recompute_or_in_lockstep_or_in_float32_is_fine():
    assert config_warnings(compose(None, None, [*BF16_ASYNC, "recompute_old_log_probs=true"])) == []
    assert config_warnings(compose(None, None, [*BF16_ASYNC[:1], "async_generation_ratio=0"])) == []
    assert config_warnings(compose(None, None, ["async_generation_ratio=1"])) == []  # float32


def test_a_boxed_env_does_not_wait_for_answer_tags():
    cfg = compose(None, None, ["+custom_envs.FrozenLake.env_config.answer_format=boxed"])
    assert answer_formats(cfg) == {"FrozenLake": "boxed"}
    (warning,) = config_warnings(cfg)
    assert "stop_strings=['</answer>'] stop at '</answer>'" in warning and "(FrozenLake: boxed)" in warning
    assert "set actor_infer.generating_args.stop_strings=[]" in warning
    fixed = [
        "+custom_envs.FrozenLake.env_config.answer_format=boxed",
        "actor_infer.generating_args.stop_strings=[]",
    ]
    assert config_warnings(compose(None, None, fixed)) == []


def test_a_tool_call_env_stops_at_its_closing_tag():
    cfg = compose(None, None, ["+custom_envs.FrozenLake.env_config.answer_format=tool_call"])
    warnings = config_warnings(cfg)
    assert len(warnings) == 2  # no stop string closes its calls, and '</answer>' closes nothing it writes
    assert (
        "custom_envs.FrozenLake (frozen_lake) answers in tool_call format, which '</tool_call>' closes"
        in warnings[0]
    )
    assert all("set actor_infer.generating_args.stop_strings=['</tool_call>']" in w for w in warnings)
    fixed = [
        "+custom_envs.FrozenLake.env_config.answer_format=tool_call",
        "actor_infer.generating_args.stop_strings=['</tool_call>']",
    ]
    assert config_warnings(compose(None, None, fixed)) == []


def test_answer_tags_without_their_stop_string_are_warned():
    (warning,) = config_warnings(compose(None, None, ["actor_infer.generating_args.stop_strings=[]"]))
    assert "answers in tags format, which '</answer>' closes" in warning
    assert "set actor_infer.generating_args.stop_strings=['</answer>']" in warning


def test_tags_of_two_formats_need_both_stop_strings():
    two = [
        "train_env_manager.tags=[FrozenLake,Calls]",
        "train_env_manager.num_env_groups=2",
        "+custom_envs.Calls.env_type=frozen_lake",
        "+custom_envs.Calls.env_config.answer_format=tool_call",
    ]
    (warning,) = config_warnings(compose(None, None, two))
    assert "custom_envs.Calls" in warning and "stop_strings=['</answer>', '</tool_call>']" in warning
    both = [*two, "actor_infer.generating_args.stop_strings=['</answer>','</tool_call>']"]
    assert config_warnings(compose(None, None, both)) == []


def test_roll_config_prints_the_warnings_and_goes_on(capsys):
    assert cli.main(["config", *BF16_ASYNC]) == 0
    captured = capsys.readouterr()
    assert "roll config: warning: actor_infer samples in bfloat16" in captured.err
    assert "recompute_old_log_probs: false" in captured.out  # the config is still printed


def test_a_move_penalised_above_an_answer_that_is_no_move_is_warned():
    hole = "+custom_envs.FrozenLake.env_config.hole_penalty=1.0"
    (warning,) = config_warnings(compose(None, None, [hole]))
    assert (
        "custom_envs.FrozenLake (frozen_lake) trains with hole_penalty=1.0 but format_penalty=0.0" in warning
    )
    assert "set format_penalty: 1.0 (or more) in custom_envs.FrozenLake.env_config" in warning
    assert (
        config_warnings(compose(None, None, [hole, "+custom_envs.FrozenLake.env_config.format_penalty=1.0"]))
        == []
    )
    # validation rewards train nothing: a penalty on a validation-only tag is not warned
    val_only = [
        "+custom_envs.Holes={env_type: frozen_lake, env_config: {hole_penalty: 1.0}}",
        "val_env_manager.tags=[Holes]",
    ]
    assert config_warnings(compose(None, None, val_only)) == []
