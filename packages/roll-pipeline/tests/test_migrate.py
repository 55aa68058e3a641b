"""`roll migrate`: ROLL's agentic configs (vendored from alibaba/ROLL at 8eb27cc under roll_configs/, the layout
of ROLL's examples/ kept so their Hydra defaults resolve) translate into roll configs that pass roll's compose
and preflight, with every ROLL key in the report; and roll's own errors know ROLL's key names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from roll_pipeline.cli.commands import main
from roll_pipeline.config.compose import ConfigError, validate
from roll_pipeline.migrate.load import load_roll_file, parse_device_mapping
from roll_pipeline.migrate.report import MigrationError
from roll_pipeline.migrate.translate import migrate_file, to_yaml
from roll_pipeline.preflight import compose

ROLL_CONFIGS = Path(__file__).resolve().parent / "roll_configs"
QWEN = ROLL_CONFIGS / "qwen2.5-0.5B-agentic"
FROZEN_LAKE = QWEN / "agent_val_frozen_lake.yaml"
SOKOBAN = QWEN / "agentic_val_sokoban.yaml"
SOKOBAN_GIGPO = QWEN / "agentic_val_sokoban_gigpo.yaml"
SOKOBAN_LORA = QWEN / "agentic_val_sokoban_lora.yaml"
ROOT = Path(__file__).resolve().parents[3]

ON_THIS_MACHINE = [
    "pretrain=builtin:tiny-frozen-lake",  # a local model instead of the hub id (preflight downloads nothing)
    "cluster.backend=local",
    "actor_infer.strategy_args.strategy_name=hf_infer",  # vllm is not installed here
    "~actor_infer.strategy_args.strategy_config",
]
"""What `roll config` needs on this machine besides the migrated file: a model, and no vLLM."""


def check(config: dict, tmp_path: Path, name: str = "migrated"):
    """The migrated config through roll's compose + preflight (what `roll config` runs), as a YAML file."""
    (tmp_path / f"{name}.yaml").write_text(to_yaml(config, "test"), encoding="utf-8")
    return compose(str(tmp_path), name, ON_THIS_MACHINE, preflight=True)


def test_frozen_lake_config_migrates_and_passes_roll_config(tmp_path):
    config, report = migrate_file(FROZEN_LAKE)
    assert report.unsupported == []
    cfg = check(config, tmp_path)
    assert (cfg.exp_name, cfg.max_steps, cfg.rollout_batch_size, cfg.sequence_length) == (
        "agentic_pipeline",
        1024,
        1024,
        8192,
    )
    # ROLL's algorithm, its defaults written out where roll's differ
    assert (cfg.adv_estimator, cfg.norm_mean_type, cfg.gamma, cfg.whiten_advantages) == (
        "grpo",
        "mean_std",
        1.0,
        True,
    )
    assert (cfg.use_kl_loss, cfg.init_kl_coef, cfg.async_generation_ratio) == (False, 0.0, 0)
    assert cfg.recompute_old_log_probs and cfg.advantage_clip == 0.2
    sampling = cfg.actor_infer.generating_args
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens) == (
        0.99,
        0.99,
        100,
        128,
    )
    assert sampling.stop_strings == []
    # Megatron on 8 GPUs -> DeepSpeed ZeRO-1; the mini-batch keeps ROLL's 2 x 64 x 8 rows
    train = cfg.actor_train
    assert train.strategy_args.strategy_name == "deepspeed_train"
    assert train.strategy_args.strategy_config == {"zero_optimization": {"stage": 1}}
    assert train.device_mapping == list(range(8)) and train.model_args.dtype == "bfloat16"
    assert (
        train.training_args.per_device_train_batch_size,
        train.training_args.gradient_accumulation_steps,
    ) == (2, 512)
    assert (train.training_args.learning_rate, train.training_args.lr_scheduler_type) == (1e-6, "cosine")
    # the env tags the managers play; ROLL's negative format penalty is roll's positive one
    assert cfg.train_env_manager.tags == ["FrozenLake"] and cfg.val_env_manager.num_env_groups == 1024
    lake = cfg.custom_envs["FrozenLake"]
    assert (lake.env_type, lake.max_actions_per_traj, lake.max_tokens_per_step, lake.max_history_turns) == (
        "frozen_lake",
        10,
        64,
        None,
    )
    assert lake.env_config == {"max_steps": 10, "format_penalty": 0.01, "is_slippery": False}
    assert cfg.custom_envs["LargerSokoban"].env_config["dim_x"] == 10
    assert "FrozenLakeThink" not in cfg.custom_envs  # defined by ROLL's env file, played by no manager
    assert cfg.train_sample_shape == "trajectory"


def _entries(report) -> dict[str, str]:
    kinds = ("translated", "converted", "defaults", "dropped", "approximated", "unsupported")
    return {
        entry.source_key if kind != "defaults" else entry.key: kind
        for kind in kinds
        for entry in getattr(report, kind)
    }


def test_report_lists_translated_converted_defaults_and_dropped_keys():
    _, report = migrate_file(FROZEN_LAKE)
    translated = {c.source_key: c.key for c in report.translated}
    assert translated["custom_envs.FrozenLake.max_steps"] == "custom_envs.FrozenLake.max_actions_per_traj"
    assert translated["max_grad_norm"] == "actor_train.training_args.max_grad_norm"
    assert translated["train_env_manager.generating_args.top_k"] == "actor_infer.generating_args.top_k"
    converted = {c.source_key: (c.source_value, c.value) for c in report.converted}
    assert converted["actor_train.model_args.dtype"] == ("bf16", "bfloat16")
    assert converted["actor_train.device_mapping"] == ("list(range(0,8))", list(range(8)))
    assert converted["resume_from_checkpoint"] == (False, None)
    assert converted["track_with"] == ("tensorboard", ["tensorboard"])
    assert converted["custom_envs.FrozenLake.env_config.format_penalty"] == (-0.01, 0.01)
    assert converted["actor_train.strategy_args.strategy_name"] == ("megatron_train", "deepspeed_train")
    defaults = {c.key: (c.roll_default, c.value) for c in report.defaults}
    assert defaults["gamma"] == (0.9, 1.0)  # (roll's default, ROLL's)
    assert defaults["use_kl_loss"] == (True, False)
    assert defaults["async_generation_ratio"] == (1, 0)
    dropped = {d.source_key: d.why for d in report.dropped}
    assert "run folder" in dropped["logging_dir"]
    assert "data-parallel" in dropped["actor_train.strategy_args.strategy_config.tensor_model_parallel_size"]
    assert "ignores it too" in dropped["custom_env"]
    approximated = {d.source_key for d in report.approximated}
    assert {"custom_envs.FrozenLake.agent_template", "val_env_manager.generating_args"} <= approximated
    text = report.format()
    for title in (
        "translated (ROLL key -> roll key)",
        "converted values",
        "ROLL defaults",
        "dropped (no effect",
    ):
        assert title in text


def _leaves(file, keys=()):
    children = file.keys_at(keys)
    if not children:
        yield keys
    for child in children:
        yield from _leaves(file, (*keys, child))


@pytest.mark.parametrize("path", [FROZEN_LAKE, SOKOBAN, SOKOBAN_GIGPO])
def test_nothing_is_dropped_silently(path):
    """Every key of the composed ROLL file (defaults files included) is in the report, itself or a parent."""
    _, report = migrate_file(path)
    named = set(_entries(report))
    for leaf in _leaves(load_roll_file(path)):
        prefixes = {".".join(leaf[:i]) for i in range(1, len(leaf) + 1)}
        assert prefixes & named, f"{'.'.join(leaf)} is in no section of the report"


def test_sokoban_configs_migrate_and_pass_roll_config(tmp_path):
    config, _ = migrate_file(SOKOBAN)
    cfg = check(config, tmp_path, "sokoban")
    assert cfg.train_env_manager.tags == ["SimpleSokoban"]
    room = cfg.custom_envs["SimpleSokoban"].env_config
    assert (room["dim_x"], room["dim_y"], room["num_boxes"], room["format_penalty"]) == (6, 6, 1, 0.15)
    assert room["search_depth"] == 300  # ROLL's Sokoban default, roll's is 100
    # GiGPO with ROLL's StepEnvManager: per-turn samples, history_length 5 = 4 earlier turns, step discount 0.95
    config, report = migrate_file(SOKOBAN_GIGPO)
    cfg = check(config, tmp_path, "sokoban_gigpo")
    assert (cfg.adv_estimator, cfg.gamma, cfg.gigpo_step_weight) == ("gigpo", 0.95, 1.0)
    assert cfg.custom_envs["SimpleSokoban"].max_history_turns == 4 and cfg.train_sample_shape == "step"
    vocab = cfg.custom_envs["SokobanDifferentGridVocab"].env_config["grid_vocab"]
    assert (vocab["wall"], vocab["player_on_target"]) == ("W", "@")
    assert {c.source_key: c.key for c in report.translated}["step_reward_gamma"] == "gamma"


def test_unsupported_settings_are_errors_unless_dropped(tmp_path):
    with pytest.raises(MigrationError) as err:
        migrate_file(SOKOBAN_LORA)
    text = str(err.value)
    assert "actor_train.model_args.lora_target: LoRA" in text and "--drop-unsupported" in text
    config, report = migrate_file(SOKOBAN_LORA, drop_unsupported=True)
    assert {d.source_key for d in report.unsupported} == {
        "actor_train.model_args.lora_target",
        "actor_infer.model_args.lora_target",
    }
    assert "unsupported, dropped (--drop-unsupported)" in report.format(drop_unsupported=True)
    check(config, tmp_path, "sokoban_lora")


def _roll_file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "traj_envs.yaml").write_text(
        (ROLL_CONFIGS / "config" / "traj_envs.yaml").read_text()
    )
    (tmp_path / "exp").mkdir(exist_ok=True)
    path = tmp_path / "exp" / "roll_file.yaml"
    path.write_text(FROZEN_LAKE.read_text() + body, encoding="utf-8")
    return path


def test_environment_variables_resolve_only_where_needed(tmp_path, monkeypatch):
    monkeypatch.delenv("ROLL_TEST_UNSET", raising=False)
    wandb = "track_with: wandb\ntracker_kwargs:\n  api_key: ${oc.env:ROLL_TEST_UNSET}\n  project: p\n"
    config, report = migrate_file(_roll_file(tmp_path, wandb))
    assert config["track_with"] == ["wandb"] and config["tracker_kwargs"] == {"project": "p"}
    assert "WANDB_API_KEY" in {d.source_key: d.why for d in report.dropped}["tracker_kwargs.api_key"]
    with pytest.raises(MigrationError, match="exp_name: environment variable ROLL_TEST_UNSET is not set"):
        migrate_file(_roll_file(tmp_path, "exp_name: ${oc.env:ROLL_TEST_UNSET}\n"))


def test_value_conversions():
    assert parse_device_mapping("list(range(0,8))") == list(range(8))
    assert parse_device_mapping("list(range(4, 8))") == [4, 5, 6, 7]
    assert parse_device_mapping("[0, 1]") == [0, 1] and parse_device_mapping(None) == []
    assert parse_device_mapping("gpu0") is None


def test_roll_migrate_command_writes_the_config_and_prints_the_report(tmp_path, capsys):
    out = tmp_path / "lake_roll.yaml"
    assert main(["migrate", str(FROZEN_LAKE), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "custom_envs.FrozenLake.max_steps -> custom_envs.FrozenLake.max_actions_per_traj" in printed
    assert f"wrote {out}" in printed and "roll config --config-path" in printed
    assert out.read_text().splitlines()[0].startswith("# Migrated from the ROLL config")
    assert main(["migrate", str(SOKOBAN_LORA), "-o", str(tmp_path / "lora.yaml")]) == 2
    assert "lora_target" in capsys.readouterr().err and not (tmp_path / "lora.yaml").exists()


def test_roll_commands_name_the_migrate_command_for_a_roll_file():
    with pytest.raises(ConfigError) as err:
        compose(str(QWEN), "agent_val_frozen_lake", [])
    text = str(err.value)
    assert "is a ROLL config" in text and f"roll migrate {FROZEN_LAKE}" in text
    assert len(text.splitlines()) < 6  # not a list of 80 unknown keys


def test_launcher_migrates_a_roll_config_when_asked(tmp_path):
    launcher = ROOT / "examples" / "start_agentic_pipeline.py"
    args = [
        sys.executable,
        str(launcher),
        "--config_path",
        str(QWEN),
        "--config_name",
        "agent_val_frozen_lake",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    refused = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 2 and "roll migrate" in refused.stderr
    done = subprocess.run(
        [*args, "--migrate"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "agent_val_frozen_lake_roll.yaml").is_file()


@pytest.mark.parametrize(
    ("override", "says", "not_says"),
    [
        ("logging_dir=./logs", "a ROLL key roll has no use for: roll writes logs", "logging_steps"),
        ("actor_train.model_args.model_type=x", "a ROLL key", "'dtype'"),
        ("max_tokens_per_step=64", "custom_envs.TAG.max_tokens_per_step", "max_consecutive_skipped_steps"),
        (
            "custom_envs.FrozenLake.max_steps=3",
            "roll's is custom_envs.FrozenLake.max_actions_per_traj",
            "did you",
        ),
        ("max_grad_norm=1", "roll's is 'actor_train.training_args.max_grad_norm'", "did you"),
        ("max_step=3", "did you mean 'max_steps'?", "ROLL"),
        ("model_typ=3", "unknown key 'model_typ'", "did you mean"),  # nothing close: no suggestion
    ],
)
def test_errors_name_source_keys_and_suggest_only_close_ones(override, says, not_says):
    with pytest.raises(ConfigError) as err:
        compose(None, None, [override])
    first = str(err.value).split("Valid keys")[0]
    assert says in first and not_says not in first


def test_a_source_key_in_a_config_file_gets_roll_s_name():
    with pytest.raises(
        ConfigError, match=r"unknown key 'reward_normalization' \(a ROLL key; roll's is norm_mean_type"
    ):
        validate({"pretrain": "builtin:tiny-frozen-lake", "reward_normalization": {"method": "mean"}})


def test_an_unset_environment_variable_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("ROLL_TEST_UNSET", raising=False)
    (tmp_path / "run.yaml").write_text(
        "defaults: [roll_defaults, _self_]\npretrain: builtin:tiny-frozen-lake\nexp_name: ${oc.env:ROLL_TEST_UNSET}\n"
    )
    with pytest.raises(ConfigError, match="exp_name: environment variable ROLL_TEST_UNSET is not set"):
        compose(str(tmp_path), "run", [])


def test_a_turn_budget_above_the_samplers_is_capped_as_roll_does_and_reported(tmp_path):
    """ROLL samples min(custom_envs.TAG.max_tokens_per_step, generating_args.max_new_tokens) tokens a turn; roll
    refuses a tag budget above the sampler's, so the migration writes the smaller one and lists the change."""
    text = FROZEN_LAKE.read_text(encoding="utf-8").replace("max_new_tokens: 128", "max_new_tokens: 32")
    (tmp_path / "qwen").mkdir()
    (tmp_path / "qwen" / "capped.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "config").symlink_to(
        ROLL_CONFIGS / "config"
    )  # its defaults files, where ROLL's tree has them
    config, report = migrate_file(tmp_path / "qwen" / "capped.yaml")
    assert config["actor_infer"]["generating_args"]["max_new_tokens"] == 32
    capped = {
        c.key: (c.source_value, c.value) for c in report.converted if c.key.endswith("max_tokens_per_step")
    }
    assert capped and all(pair == (64, 32) for pair in capped.values())  # the file sets 64 a turn
    assert all(env["max_tokens_per_step"] == 32 for env in config["custom_envs"].values())
    check(config, tmp_path)
