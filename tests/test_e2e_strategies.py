"""End to end with the backends picked by `strategy_name`: DeepSpeed really trains, and the weights reach the
inference worker every `model_update_frequency` steps as the versions the rollout records."""

from __future__ import annotations

import json

import pytest
from roll_pipeline import AgenticPipeline
from roll_pipeline.preflight import compose

SMALL = [
    "cluster.backend=local",
    "max_steps=2",
    "save_steps=2",
    "eval_steps=2",
    "train_env_manager.num_env_groups=2",
    "train_env_manager.group_size=4",
    "train_env_manager.max_env_num_per_worker=8",
    "val_env_manager.num_env_groups=4",
    "val_env_manager.max_env_num_per_worker=4",
    "custom_envs.FrozenLake.max_actions_per_traj=3",
    "actor_train.training_args.per_device_train_batch_size=16",
    "actor_train.training_args.gradient_accumulation_steps=1",
    "print_baselines=false",
    "track_with=[]",
]


@pytest.mark.deepspeed
@pytest.mark.slow
def test_deepspeed_train_through_the_pipeline_with_model_update_frequency(tmp_path):
    pytest.importorskip("deepspeed")
    cfg = compose(
        None,
        None,
        [
            *SMALL,
            f"output_dir={tmp_path}",
            "exp_name=ds",
            "async_generation_ratio=0",  # lockstep: the recorded versions are exactly the synced ones
            "kl_penalty=full_forward",  # the exact KL, in the DeepSpeed worker against its frozen reference
            "model_update_frequency=2",
            "actor_train.strategy_args.strategy_name=deepspeed_train",
            "+actor_train.strategy_args.strategy_config={zero_optimization: {stage: 2}}",
        ],
        preflight=True,
    )
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        assert type(pipeline.parts.actor_train.main.strategy).__name__ == "DeepSpeedTrainStrategy"
        # the exact KL needs no reference worker: the train worker holds the frozen copy
        assert pipeline.parts.reference is pipeline.parts.actor_train
        assert pipeline.parts.actor_train.main.reference_model is not None
        params = sum(p.numel() for p in pipeline.parts.actor_train.main.strategy.model.parameters())
        summary = pipeline.run()
    finally:
        pipeline.close()
    assert summary.steps == 2
    assert summary.last_checkpoint is not None
    assert (summary.last_checkpoint / "model" / "deepspeed").is_dir()  # DeepSpeed's own checkpoint
    rows = [json.loads(line) for line in (tmp_path / "ds" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0  # the validation before training
    first, second = rows[1:]
    # step 1 is not a sync step: nothing sent, the rollout still samples version 0
    assert first["weight_sync/skipped"] == 1 and first["weight_sync/bytes"] == 0
    assert first["weight_sync/version"] == 0 and first["weight_sync/policy_lag"] == 1
    # step 2 sends every parameter once, in the inference dtype (float32)
    assert second["weight_sync/skipped"] == 0 and second["weight_sync/bytes"] == 4 * params
    assert second["weight_sync/version"] == 2 and second["weight_sync/policy_lag"] == 0
    assert second["weight_sync/mb_per_s"] > 0 and second["weight_sync/buckets"] >= 1
    assert "actor/pg_loss" in second and "val/score/mean" in second
    assert second["critic/kl"] > 0 and "actor/kl_loss" in second  # the actor moved from the reference
