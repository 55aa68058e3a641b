"""Backend and device choices per role: strategy checks at config time, placement, the GGUF model folder."""

from __future__ import annotations

import importlib.util

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.config.strategies import strategy_problems
from roll_pipeline.runtime.placement import Placement, model_folder, plan_placement


def _roles(*mappings: list[int], gpus: list[float | None] | None = None) -> dict[str, WorkerConfig]:
    names = ["actor_train", "actor_infer", "reference"]
    gpus = gpus or [None] * len(mappings)
    return {
        name: WorkerConfig(device_mapping=mapping, num_gpus_per_worker=share)
        for name, mapping, share in zip(names, mappings, gpus, strict=False)
    }


def test_defaults_have_no_strategy_problem():
    assert strategy_problems({}) == []
    assert strategy_problems(tiny_config().model_dump()) == []


def test_a_strategy_in_the_wrong_role_is_named_with_the_right_ones():
    (problem,) = strategy_problems({"actor_train": {"strategy_args": {"strategy_name": "hf_infer"}}})
    assert "actor_train.strategy_args.strategy_name='hf_infer'" in problem
    assert "'train' role" in problem and "deepspeed_train" in problem and "hf_train" in problem


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_an_uninstalled_strategy_names_its_extra():
    (problem,) = strategy_problems({"actor_infer": {"strategy_args": {"strategy_name": "vllm"}}})
    assert "actor_infer.strategy_args.strategy_name='vllm'" in problem
    assert "--extra vllm" in problem and "roll-strategies[vllm]" in problem


def test_strategy_config_for_a_backend_that_reads_none_is_a_problem():
    (problem,) = strategy_problems(
        {"reference": {"strategy_args": {"strategy_name": "hf_train", "strategy_config": {"x": 1}}}}
    )
    assert "reference.strategy_args.strategy_config" in problem and "reads no strategy_config" in problem


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_roll_config_refuses_an_uninstalled_strategy_before_anything_starts(capsys):
    status = cli.main(["config", "actor_infer.strategy_args.strategy_name=vllm"])
    assert status == 2
    err = capsys.readouterr().err
    assert "strategy_name='vllm'" in err and "--extra vllm" in err


def test_cpu_roles_ask_for_no_gpu_in_either_backend():
    for backend in ("ray", "local"):
        assert set(plan_placement(_roles([], [], []), backend).values()) == {Placement("cpu", 0.0)}


def test_in_process_mode_uses_the_first_mapped_gpu():
    placed = plan_placement(_roles([1], [0, 1], []), "local")
    assert placed == {
        "actor_train": Placement("cuda:1", 0.0),
        "actor_infer": Placement("cuda:0", 0.0),
        "reference": Placement("cpu", 0.0),
    }


def test_colocated_roles_share_their_gpus_and_separate_ones_get_whole_gpus():
    colocated = plan_placement(_roles([0], [0], [0]), "ray")
    assert [p.num_gpus for p in colocated.values()] == pytest.approx([1 / 3] * 3)
    assert {p.device for p in colocated.values()} == {"cuda"}
    split = plan_placement(_roles([0], [1], [0]), "ray")
    assert [split[n].num_gpus for n in ("actor_train", "actor_infer", "reference")] == [0.5, 1.0, 0.5]
    wide = plan_placement(_roles([0, 1], [2, 3]), "ray")
    assert wide["actor_infer"].num_gpus == 2.0 and wide["actor_infer"].ranks == 1  # one worker on both
    # a trained role runs one rank per GPU, each asking for its GPU (shared with the roles mapped to it)
    assert (wide["actor_train"].ranks, wide["actor_train"].num_gpus) == (2, 1.0)
    shared = plan_placement(_roles([0, 1], [0]), "ray")
    assert (shared["actor_train"].ranks, shared["actor_train"].num_gpus) == (2, 0.5)
    local = plan_placement(_roles([2, 3], [0]), "local")["actor_train"]
    assert [local.device_of(r) for r in range(local.ranks)] == ["cuda:2", "cuda:3"]


def test_num_gpus_per_worker_overrides_the_share():
    placed = plan_placement(_roles([0], [0], [0], gpus=[0.5, 0.25, None]), "ray")
    assert [p.num_gpus for p in placed.values()] == [0.5, 0.25, pytest.approx(1 / 3)]


def test_model_folder_without_gguf_is_pretrain_and_roles_must_agree(tmp_path):
    assert model_folder(tmp_path, _roles([], [])) == tmp_path
    roles = {
        "actor_train": WorkerConfig.model_validate({"model_args": {"gguf_file": "a.gguf"}}),
        "actor_infer": WorkerConfig.model_validate({"model_args": {"gguf_file": "b.gguf"}}),
    }
    with pytest.raises(ValueError, match=r"one model_args\.gguf_file for all roles"):
        model_folder(tmp_path, roles)


def test_the_critic_role_is_checked_like_the_others():
    (problem,) = strategy_problems({"critic": {"strategy_args": {"strategy_name": "hf_train"}}})
    assert problem.startswith("critic.strategy_args.strategy_name='hf_train'") and "hf_critic" in problem
