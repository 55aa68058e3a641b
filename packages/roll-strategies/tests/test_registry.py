from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from roll_strategies import (
    STRATEGIES,
    ActorInferWorker,
    ActorTrainWorker,
    CriticWorker,
    HFCriticStrategy,
    HFInferStrategy,
    HFTrainStrategy,
    ReferenceWorker,
    StrategyError,
    StrategyNotAvailableError,
    available_strategies,
    check_strategy,
    create_strategy,
    strategy_class,
)
from roll_strategies.registry import StrategySpec


def test_the_config_names_are_registered_per_role():
    assert set(STRATEGIES) == {"hf_train", "hf_infer", "hf_critic", "deepspeed_train", "vllm"}
    assert available_strategies("critic") == ["hf_critic"]
    assert strategy_class("hf_critic", "critic") is HFCriticStrategy
    assert available_strategies("train") == ["deepspeed_train", "hf_train"]
    assert available_strategies("infer") == ["hf_infer", "vllm"]
    assert available_strategies("reference") == ["hf_infer", "hf_train"]
    assert strategy_class("hf_train", "train") is HFTrainStrategy
    assert strategy_class("hf_infer", "infer") is HFInferStrategy


def test_unknown_name_suggests_the_close_one():
    with pytest.raises(StrategyNotAvailableError, match=r"'deepspeed_trian'.*Did you mean 'deepspeed_train'"):
        check_strategy("deepspeed_trian", "train")
    with pytest.raises(ImportError):  # also an ImportError, for callers that catch that
        check_strategy("megatron_train", "train")


def test_wrong_role_names_the_strategies_that_fit():
    with pytest.raises(
        StrategyNotAvailableError, match=r"'train' role \(\['deepspeed_train', 'hf_train'\]\).*'vllm'"
    ):
        check_strategy("vllm", "train")


def test_missing_library_names_the_extra_without_importing_it(monkeypatch):
    spec = StrategySpec(
        "fake", "nowhere:Fake", frozenset({"infer"}), requires=("no_such_module_xyz",), extra="fake"
    )
    monkeypatch.setitem(STRATEGIES, "fake", spec)
    with pytest.raises(StrategyNotAvailableError) as err:
        check_strategy("fake", "infer")
    message = str(err.value)
    assert "no_such_module_xyz" in message
    assert "uv sync --all-packages --extra fake" in message and "roll-strategies[fake]" in message


def test_check_imports_no_backend():
    code = (
        "import sys\nfrom roll_strategies import check_strategy, STRATEGIES\n"
        "for name, spec in STRATEGIES.items():\n"
        "    for role in spec.roles:\n"
        "        try: check_strategy(name, role)\n"
        "        except ImportError: pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('deepspeed', 'vllm')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hf_strategies_refuse_a_strategy_config(tiny_model_dir):
    with pytest.raises(StrategyError, match=r"empty strategy_config for 'hf_train'.*\['zero_optimization'\]"):
        create_strategy(
            "hf_train", "train", tiny_model_dir, strategy_config={"zero_optimization": {"stage": 2}}
        )


def test_workers_pick_their_strategy_by_name(tiny_model_dir):
    assert isinstance(ActorTrainWorker(tiny_model_dir).strategy, HFTrainStrategy)
    assert isinstance(ActorInferWorker(tiny_model_dir, strategy_name="hf_infer").strategy, HFInferStrategy)
    ref = ReferenceWorker(tiny_model_dir)
    assert isinstance(ref.strategy, HFTrainStrategy) and ref.strategy.optimizer is None
    assert isinstance(ReferenceWorker(tiny_model_dir, strategy_name="hf_infer").strategy, HFInferStrategy)
    with pytest.raises(StrategyNotAvailableError, match="'infer' role"):
        ActorInferWorker(tiny_model_dir, strategy_name="hf_train")
    assert isinstance(CriticWorker(tiny_model_dir).strategy, HFCriticStrategy)
    with pytest.raises(StrategyNotAvailableError, match="'critic' role"):
        CriticWorker(tiny_model_dir, strategy_name="hf_train")


def test_full_kl_and_packing_need_a_hugging_face_strategy(tiny_model_dir):
    worker = ActorTrainWorker(tiny_model_dir)
    assert worker.packing_supported()
    batch = {
        k: torch.ones((1, 4), dtype=torch.long) for k in ("input_ids", "attention_mask", "response_mask")
    }
    with pytest.raises(StrategyError, match=r"built with reference_model_path.*got one without"):
        worker.compute_reference_kl(batch, 1)
    with pytest.raises(StrategyError, match=r"built with reference_model_path"):
        worker.train_step([batch], lambda lp, ent, mb: (lp.sum(), {}), with_entropy=False, with_full_kl=True)
    worker.strategy = object()  # a backend without the packed / full-vocabulary forward
    assert not worker.packing_supported()
    with pytest.raises(StrategyError, match=r"Hugging Face model.*exact KL.*got object"):
        worker.compute_reference_kl(batch, 1)
