from __future__ import annotations

import pytest
from roll_strategies import StrategyError, build_deepspeed_config


def test_auto_values_come_from_the_role():
    config = build_deepspeed_config(
        {
            "zero_optimization": {
                "stage": 3,
                "stage3_prefetch_bucket_size": "auto",
                "offload_param": {"device": "cpu"},
            },
            "bf16": {"enabled": "auto"},
            "gradient_clipping": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": 4,
        },
        dtype="bfloat16",
        max_grad_norm=0.5,
        world_size=2,
    )
    assert config["zero_optimization"] == {"stage": 3, "offload_param": {"device": "cpu"}}
    assert config["bf16"] == {"enabled": True}
    assert config["gradient_clipping"] == 0.5
    assert (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]) == (1, 4)
    assert config["train_batch_size"] == 8
    assert (
        config["managed_gradient_accumulation"] is False and config["zero_allow_untested_optimizer"] is True
    )


def test_defaults_and_the_input_is_not_mutated():
    given: dict = {"zero_optimization": {"stage": "auto"}}
    config = build_deepspeed_config({}, dtype="float32", max_grad_norm=1.0)
    assert config["zero_optimization"] == {"stage": 2} and config["bf16"] == {"enabled": False}
    assert (
        build_deepspeed_config(given, dtype="float32", max_grad_norm=1.0)["zero_optimization"]["stage"] == 2
    )
    assert given == {"zero_optimization": {"stage": "auto"}}


@pytest.mark.parametrize(
    ("strategy_config", "dtype", "match"),
    [
        ({"optimizer": {"type": "AdamW"}}, "float32", "'optimizer' block.*learning_rate"),
        ({"scheduler": {"type": "WarmupLR"}}, "float32", "'scheduler' block.*warmup_steps"),
        ({"fp16": {"enabled": True}}, "float32", "'fp16' block.*use bf16"),
        ({"bf16": {"enabled": True}}, "float32", "bf16.enabled to agree with the role's dtype 'float32'"),
        ({"zero_optimization": {"stage": 4}}, "float32", "stage in 0, 1, 2, 3, got 4"),
        ({"managed_gradient_accumulation": True}, "float32", "managed_gradient_accumulation false"),
        ({}, "float16", "float32 or bfloat16"),
    ],
)
def test_contradictions_are_clear_errors(strategy_config, dtype, match):
    with pytest.raises(StrategyError, match=match):
        build_deepspeed_config(strategy_config, dtype=dtype, max_grad_norm=1.0)


def test_fp16_block_that_is_off_is_accepted():
    config = build_deepspeed_config({"fp16": {"enabled": "auto"}}, dtype="float32", max_grad_norm=1.0)
    assert "fp16" not in config
