"""`roll eval` reproduces a training run's validation figure from its checkpoint, through the HF model
in-process and through `roll serve`'s OpenAI-compatible server; `roll eval` of a bad path is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline.cli.commands import main
from roll_pipeline.config.compose import compose
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.serving.evaluate import checkpoint_model_dir, run_eval
from roll_pipeline.serving.openai_server import OpenAICompatibleServer
from roll_rollout.policies.openai_policy import OpenAIPolicy, OpenAISettings
from small_runs import run_to_end, steps

RUN = [
    *steps(2),
    "cluster.backend=local",
    "train_env_manager.num_env_groups=2",
    "train_env_manager.group_size=4",
    "train_env_manager.max_env_num_per_worker=4",
    "val_env_manager.num_env_groups=64",
    "val_env_manager.max_env_num_per_worker=32",
    "custom_envs.FrozenLake.max_actions_per_traj=4",
    "actor_train.training_args.per_device_train_batch_size=16",
    "actor_train.training_args.learning_rate=3e-3",
    "print_baselines=false",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float], list[str]]:
    out = tmp_path_factory.mktemp("runs")
    overrides = [*RUN, f"output_dir={out}", "exp_name=evalme"]
    run_to_end(compose(None, None, overrides))
    rows = read_metrics(out / "evalme")
    assert rows[0]["step"] == 0 and "val/env/FrozenLake/success" in rows[0]
    assert rows[-1]["val/env/FrozenLake/success"] > 0  # a figure worth reproducing
    return out / "evalme", rows[-1], overrides


@pytest.mark.slow
def test_eval_of_a_checkpoint_reproduces_the_logged_validation(trained, tmp_path, capsys):
    run_dir, logged, overrides = trained
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(run_dir), "--json", str(out), *overrides]) == 0
    result = json.loads(out.read_text())
    assert result["model"].endswith("checkpoint-2/model")
    assert result["metrics"]["val/env/FrozenLake/success"] == logged["val/env/FrozenLake/success"]
    assert result["metrics"]["val/score/mean"] == pytest.approx(logged["val/score/mean"])
    (tag,) = result["tags"]
    assert tag["episodes"] == 64 and tag["success"] == logged["val/env/FrozenLake/success"]
    assert "| FrozenLake | 64 |" in capsys.readouterr().out


@pytest.mark.slow
def test_eval_through_the_openai_server_matches_the_in_process_model(trained):
    run_dir, logged, overrides = trained
    config = compose(None, None, overrides)
    model = checkpoint_model_dir(run_dir)
    backend = PolicyServer(model, seed=0, stop_strings=config.actor_infer.generating_args.stop_strings)
    tokenizer = backend.worker.strategy.tokenizer
    with OpenAICompatibleServer(backend.policy, tokenizer, "ckpt") as server:
        policy = OpenAIPolicy(OpenAISettings(server.url, "ckpt", api_key_env=None, max_concurrency=16))
        result = run_eval(config, model, policy)
    assert result["policy"] == "OpenAIPolicy" and result["episodes"] == 64
    assert result["metrics"]["val/env/FrozenLake/success"] == logged["val/env/FrozenLake/success"]


def test_eval_of_a_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["eval", "--checkpoint", str(tmp_path / "nope"), "print_baselines=false"]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.slow
def test_rollout_dumps_readable_transcripts_that_show_prints(trained, tmp_path, capsys):
    from roll_pipeline.observe.transcripts import read_dump

    run_dir, _, overrides = trained
    dump = tmp_path / "dump"
    assert (
        main(["rollout", "--checkpoint", str(run_dir), "--episodes", "8", "--dump", str(dump), *overrides])
        == 0
    )
    trajs = read_dump(dump)
    lines = (dump / "transcripts.jsonl").read_text().splitlines()
    assert len(trajs) == len(lines) == 8
    first = json.loads(lines[0])
    assert first["seed"] == trajs[0].seed and len(first["turns"]) == len(trajs[0].turns) > 0
    assert first["turns"][0]["response"] == trajs[0].turns[0].response_text
    assert "## episode 7" in (dump / "transcripts.md").read_text()
    capsys.readouterr()
    assert main(["show", str(dump), "--episode", "0"]) == 0
    shown = capsys.readouterr().out
    assert f"seed {trajs[0].seed}" in shown and "**turn 1**, reward" in shown
    (dump / "trajectories.msgpack").write_bytes(b"\x93garbage")
    assert main(["show", str(dump)]) == 2
    assert "not a roll trajectory dump" in capsys.readouterr().err
