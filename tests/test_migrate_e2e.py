"""ROLL's FrozenLake and Sokoban agentic configs (alibaba/ROLL 8eb27cc, vendored in
packages/roll-pipeline/tests/roll_configs) migrated by `roll migrate` run 2 steps on the CPU.

Besides the migrated file only the machine changes: a local builtin model instead of the hub id, the CPU
instead of 8 GPUs (in-process roles, float32, hf_infer instead of vLLM; actor_train stays on the DeepSpeed
backend the migration chose), and the sizes of a 2-step run (ROLL's 1024 trajectories a step would take
hours on 2 cores).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from roll_pipeline.migrate.translate import migrate_file, to_yaml
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.preflight import compose
from small_runs import run_to_end

ROLL_CONFIGS = Path(__file__).resolve().parents[1] / "packages" / "roll-pipeline" / "tests" / "roll_configs"

ON_THE_CPU = [
    "cluster.backend=local",
    "actor_infer.strategy_args.strategy_name=hf_infer",
    "~actor_infer.strategy_args.strategy_config",
    *(f"{role}.device_mapping=[]" for role in ("actor_train", "actor_infer")),
    *(f"{role}.model_args.dtype=float32" for role in ("actor_train", "actor_infer")),
]
TWO_SMALL_STEPS = [
    "max_steps=2",
    "eval_steps=2",
    "save_steps=2",
    "rollout_batch_size=8",
    "train_env_manager.num_env_groups=1",
    "train_env_manager.num_groups_partition=[1]",
    "val_env_manager.num_env_groups=4",
    "val_env_manager.num_groups_partition=[1,1,1,1]",
    "val_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=4",
    "track_with=[]",
    "render_save_dir=null",
    "print_baselines=false",
]


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("name", "model"),
    [("agent_val_frozen_lake", "builtin:tiny-frozen-lake"), ("agentic_val_sokoban", "builtin:tiny-sokoban")],
)
def test_a_migrated_roll_config_runs_two_steps_on_the_cpu(name, model, tmp_path):
    config, report = migrate_file(ROLL_CONFIGS / "qwen2.5-0.5B-agentic" / f"{name}.yaml")
    assert report.unsupported == []
    assert config["actor_train"]["strategy_args"]["strategy_name"] == "deepspeed_train"
    (tmp_path / f"{name}.yaml").write_text(to_yaml(config, name), encoding="utf-8")
    overrides = [f"pretrain={model}", *ON_THE_CPU, *TWO_SMALL_STEPS, f"output_dir={tmp_path / 'runs'}"]
    cfg = compose(str(tmp_path), name, overrides, preflight=True)
    summary = run_to_end(cfg)
    assert summary.steps == 2
    rows = read_metrics(tmp_path / "runs" / cfg.exp_name)
    trained = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in trained] == [1, 2]
    assert all(math.isfinite(r["actor/pg_loss"]) for r in trained)
