"""`roll config` and `roll train` check the config before anything starts: each bad value exits non-zero,
names the value and the fix, starts no worker, and every problem comes in one error.

The `roll` script is `sys.exit(roll_pipeline.cli.main())`: what `main` returns is the exit status.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.config.compose import parse_args
from roll_pipeline.preflight import check_pretrain, compose
from roll_pipeline.state.checkpoint import CheckpointManager

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

BAD_VALUES = {
    "unknown env_type": (
        ["custom_envs.FrozenLake.env_type=frozen_lak"],
        [
            "env_type='frozen_lak'",
            "Did you mean 'frozen_lake'?",
            "Registered: cliff_walking, four_choice, frozen_lake",
        ],
    ),
    "env_config out of range": (
        ["+custom_envs.FrozenLake.env_config.size=-3"],
        ["custom_envs.FrozenLake.env_config", "field 'size'", "got -3", "greater than or equal to 2"],
    ),
    "unknown env_config key": (
        ["+custom_envs.FrozenLake.env_config.no_such_knob=1"],
        [
            "unknown field 'no_such_knob'",
            "Allowed fields: answer_format, demonstrator, describe, format_penalty, hole_penalty, is_slippery",
        ],
    ),
    "typo in an env_config key": (
        ["+custom_envs.FrozenLake.env_config.sise=3"],
        ["unknown field 'sise'", "Did you mean 'size'?"],
    ),
    "missing checkpoint": (
        ["resume_from_checkpoint=/nonexistent"],
        [
            "resume_from_checkpoint='/nonexistent'",
            "does not exist",
            "start the run without resume_from_checkpoint",
        ],
    ),
    "missing model folder": (
        ["pretrain=/no/such/model"],
        [
            "pretrain='/no/such/model' is neither a folder nor a Hugging Face hub id",
            "set pretrain to a local model folder",
        ],
    ),
    "unknown builtin model": (
        ["pretrain=builtin:huge"],
        ["no builtin model 'huge'", "available: builtin:", "builtin:tiny-frozen-lake,"],
    ),
}


class NoWorkers:
    """Stands in for AgenticPipeline: constructing it (which spawns workers) fails the test."""

    def __init__(self, *args, **kwargs) -> None:
        raise AssertionError("a worker was started although the config is bad")


@pytest.fixture
def no_workers(monkeypatch):
    import roll_pipeline.pipeline

    monkeypatch.setattr(roll_pipeline.pipeline, "AgenticPipeline", NoWorkers)


@pytest.mark.parametrize("command", ["config", "train"])
@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_bad_value_exits_nonzero_naming_it_and_the_fix(case, command, capsys, no_workers):
    overrides, expected = BAD_VALUES[case]
    assert cli.main([command, *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"roll {command}: 1 problem(s) in the config:")
    for text in expected:
        assert text in err, f"{text!r} not in {err}"


def test_every_problem_is_reported_in_one_error(capsys, no_workers):
    overrides = [
        "max_steps=-1",
        "custom_envs.FrozenLake.env_type=no_such_env",
        "resume_from_checkpoint=/nonexistent",
        "pretrain=/no/such/model",
    ]
    assert cli.main(["train", *overrides]) == 2
    err = capsys.readouterr().err
    assert "4 problem(s)" in err
    assert all(s in err for s in ("max_steps", "no_such_env", "/nonexistent", "/no/such/model"))


def test_settings_may_come_before_or_after_the_flags():
    argv = ["exp_name=before", "--config-path", "tiny-cpu-agentic", "seed=7", "--config-name"]
    args = parse_args([*argv, "agent_val_frozen_lake", "max_steps=5", "--no-progress"])
    assert args.overrides == ["exp_name=before", "seed=7", "max_steps=5"] and args.no_progress
    cfg = compose(args.config_path, args.config_name, args.overrides, search_from=EXAMPLES, preflight=True)
    assert (cfg.exp_name, cfg.seed, cfg.max_steps) == ("before", 7, 5)


def test_the_default_and_example_configs_pass(capsys):
    assert cli.main(["config"]) == 0
    assert "frozen_lake" in capsys.readouterr().out
    argv = ["--config_path", "tiny-cpu-agentic", "--config_name", "agent_val_frozen_lake"]
    assert cli.main(["config", *argv]) == 0


def test_a_checkpoint_is_verified_before_anything_starts(tmp_path, capsys, no_workers):
    manager = CheckpointManager(tmp_path / "checkpoints")

    async def save_model(path: Path) -> None:
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"weights" * 100)

    for step in (1, 2):
        asyncio.run(manager.save(step, {"step": step}, save_model))
    good, bad = tmp_path / "checkpoints" / "checkpoint-1", tmp_path / "checkpoints" / "checkpoint-2"
    assert cli.main(["config", f"resume_from_checkpoint={bad}"]) == 0
    (bad / "model" / "model.safetensors").write_bytes(b"weights")
    assert cli.main(["train", f"resume_from_checkpoint={bad}"]) == 2
    err = capsys.readouterr().err
    assert "model/model.safetensors has 7 bytes where the manifest says 700" in err
    assert f"resume_from_checkpoint={good}" in err


def test_pretrain_folders_and_the_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = tmp_path / "model"
    model.mkdir()
    assert "has no config.json" in check_pretrain(str(model))[0]
    assert check_pretrain(str(model), gguf_file="m.gguf")[0].endswith(
        "has no m.gguf; point pretrain at a Hugging Face model folder"
    )
    (model / "config.json").write_text("{}")
    assert check_pretrain(str(model)) == []
    assert "`hf download org/name`" in check_pretrain("org/name")[0]
    assert "neither a folder nor a Hugging Face hub id" in check_pretrain(str(tmp_path / "absent"))[0]


def test_a_hub_id_in_the_cache_is_accepted(tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--org--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "`hf download org/cached`" in check_pretrain("org/cached")[0]  # a config without weights
    (snapshot / "model.safetensors").write_bytes(b"weights")
    assert check_pretrain("org/cached") == []


def test_roll_config_refuses_an_unisolated_sandbox_unless_opted_out(capsys, monkeypatch, no_workers):
    """Where the kernel refuses namespaces (as `isolation_available` finds), the default sandbox fails."""
    from roll_envs.envs.sandbox import runner

    monkeypatch.setattr(runner, "isolation_available", lambda: (False, "unshare: Operation not permitted"))
    sandbox = ["custom_envs.FrozenLake.env_type=sandbox"]
    assert cli.main(["config", *sandbox]) == 2
    err = capsys.readouterr().err
    for text in ("custom_envs.FrozenLake.env_config", "field 'isolation'", "Operation not permitted"):
        assert text in err, err
    assert "set isolation='none'" in err
    assert cli.main(["config", *sandbox, "+custom_envs.FrozenLake.env_config.isolation=none"]) == 0, (
        capsys.readouterr().err
    )
