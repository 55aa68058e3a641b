"""Data-parallel ranks from the config: how many each trained role runs, what each rank asks Ray for, and the
settings that are refused with the fix (`config.role_checks.rank_problems`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.runtime.cluster import CpuCapacity
from roll_pipeline.runtime.placement import plan_cpus, plan_placement


def _problems(**overrides: object) -> str:
    with pytest.raises(ValidationError) as err:
        tiny_config(**overrides)
    return str(err.value)


def test_the_rank_count_is_world_size_on_the_cpu_and_the_gpus_of_device_mapping():
    assert WorkerConfig().data_parallel_size == 1
    assert WorkerConfig(world_size=3).data_parallel_size == 3
    assert WorkerConfig(device_mapping=[0, 1]).data_parallel_size == 2
    cfg = tiny_config(actor_train={"world_size": 2})
    roles = {"actor_train": cfg.actor_train, "actor_infer": cfg.actor_infer}
    placed = plan_placement(roles, "ray")
    assert (placed["actor_train"].ranks, placed["actor_infer"].ranks) == (2, 1)
    assert placed["actor_train"].device_of(1) == "cpu"


def test_a_gae_critic_runs_ranks_too():
    cfg = tiny_config(adv_estimator="gae", critic={"world_size": 2})
    assert plan_placement({"critic": cfg.critic}, "ray")["critic"].ranks == 2


def test_each_rank_asks_for_the_roles_cpus_and_the_ranks_share_what_is_free():
    roles = {"actor_train": WorkerConfig(world_size=2), "actor_infer": WorkerConfig()}
    placed = plan_placement(roles, "ray")
    plan = plan_cpus(roles, placed, {"actor_train": 1, "actor_infer": 1}, 4, CpuCapacity(2.0, 2.0, False))
    assert plan.roles == {"actor_train": 0.6, "actor_infer": 0.6}  # (2 - 4 x 0.05) / 3 ranks and workers
    assert plan.problem is None
    fixed = {"actor_train": WorkerConfig(world_size=2, num_threads=1), "actor_infer": WorkerConfig()}
    plan = plan_cpus(fixed, plan_placement(fixed, "ray"), {"actor_train": 1, "actor_infer": 1}, 4, None)
    assert plan.roles["actor_train"] == 1.0
    tight = plan_cpus(
        fixed,
        plan_placement(fixed, "ray"),
        {"actor_train": 1, "actor_infer": 1},
        4,
        CpuCapacity(2.0, 2.0, False),
    )
    assert (
        tight.problem is not None
        and "actor_train 2 ranks x 1" in tight.problem
        and "world_size" in tight.problem
    )


def test_an_untrained_role_with_world_size_is_refused():
    message = _problems(reference={"world_size": 2})
    assert "reference.world_size is set, but it is never trained" in message


def test_on_gpus_world_size_must_be_the_number_of_mapped_gpus():
    message = _problems(actor_train={"device_mapping": [0, 1], "world_size": 3})
    assert "actor_train.world_size=3 with device_mapping=[0, 1]" in message
    assert "drop world_size, or list 3 GPUs in device_mapping" in message
    assert (
        tiny_config(actor_train={"device_mapping": [0, 1], "world_size": 2}).actor_train.data_parallel_size
        == 2
    )


def test_a_gpu_listed_twice_and_more_than_one_gpu_per_rank_are_refused():
    assert "lists a GPU twice" in _problems(actor_train={"device_mapping": [0, 0]})
    message = _problems(actor_train={"device_mapping": [0, 1], "num_gpus_per_worker": 2})
    assert "num_gpus_per_worker=2 asks each of its 2 ranks for more than one GPU" in message


def test_a_mini_batch_needs_a_row_per_rank():
    message = _problems(
        actor_train={
            "world_size": 4,
            "training_args": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2},
        }
    )
    assert "actor_train runs 4 data-parallel ranks, but a mini-batch is" in message
    assert "1 x 2 = 2 rows" in message and "gradient_accumulation_steps" in message


def test_a_strategy_without_ranks_is_refused():
    message = _problems(actor_train={"world_size": 2, "strategy_args": {"strategy_name": "hf_infer"}})
    assert (
        "strategy_name='hf_infer' has none" in message and "hf_train, deepspeed_train, hf_critic" in message
    )
