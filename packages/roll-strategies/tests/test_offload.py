"""Trainer offload: training with an offload / reload between every step equals training without, bit for bit.

On the CPU `offload` copies every tensor into a fresh CPU buffer and `reload` copies it back (`train.offload`),
so these tests run the real swap of each tensor's storage under the optimiser, the masters and the tied weights.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from roll_strategies import (
    ActorTrainWorker,
    CriticWorker,
    OptimizerSettings,
    ReferenceWorker,
    create_strategy,
)
from roll_strategies.train.offload import OffloadReport, optimizer_state_tensors

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
STEPS = 3
SETTINGS = OptimizerSettings(learning_rate=3e-3, warmup_steps=1)


def _micro_batches(step: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for i in range(2):
        gen = torch.Generator().manual_seed(100 * step + i)
        ids = torch.randint(8, 200, (3, 10), generator=gen)
        mask = torch.ones_like(ids)
        response = mask.bool()
        response[:, :3] = False
        out.append(
            {
                "input_ids": ids,
                "attention_mask": mask,
                "response_mask": response,
                "returns": torch.randn((3, 10), generator=gen),
                "loss_scale": torch.tensor(0.5),
            }
        )
    return out


def nll(log_probs, entropy, mb):
    m = mb["response_mask"].float()
    loss = -(log_probs * m).sum() / m.sum()
    return loss, {"nll": float(loss.detach())}


def value_loss(values, mb):
    m = mb["response_mask"].float()
    loss = 0.5 * ((values - mb["returns"]).square() * m).sum() / m.sum()
    return loss, {"vf": float(loss.detach())}


def _train(strategy, critic: bool, offload: bool) -> list[OffloadReport]:
    reports = []
    for step in range(STEPS):
        if critic:
            strategy.train_step(_micro_batches(step), value_loss)
        else:
            strategy.train_step(_micro_batches(step), nll, with_entropy=False)
        if offload:
            reports += [strategy.offload(), strategy.reload()]
    return reports


def _snapshot(strategy) -> dict[str, torch.Tensor]:
    """Model weights, fp32 masters and optimiser state, cloned."""
    out = {f"model.{n}": t.detach().clone() for n, t in strategy.model.state_dict().items()}
    trainer = getattr(strategy, "trainer", None)
    optimizer = trainer.optimizer if trainer is not None else strategy.optimizer
    if trainer is not None:
        out.update({f"master.{i}": m.detach().clone() for i, m in enumerate(trainer.masters)})
    out.update({f"optim.{i}": t.clone() for i, t in enumerate(optimizer_state_tensors(optimizer))})
    return out


def _assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


def _check(build, critic: bool = False) -> list[OffloadReport]:
    plain, swapped = build(), build()
    _train(plain, critic, offload=False)
    reports = _train(swapped, critic, offload=True)
    _assert_bitwise_equal(_snapshot(plain), _snapshot(swapped))
    return reports


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hf_train_with_offload_between_steps_equals_without(tiny_model_dir, dtype):
    def build():
        return create_strategy("hf_train", "train", tiny_model_dir, dtype=dtype, optimizer=SETTINGS)

    reports = _check(build)
    strategy = build()
    params = sum(p.numel() * p.element_size() for p in strategy.model.parameters())
    # after a step: the weights, (bf16) the fp32 masters, and AdamW's two moments per master moved
    masters = sum(p.numel() * 4 for p in strategy.model.parameters()) if dtype == "bfloat16" else 0
    assert reports[0].bytes_moved >= params + masters + 2 * sum(
        p.numel() * 4 for p in strategy.model.parameters()
    )
    assert reports[0].bytes_moved == reports[1].bytes_moved
    assert all(r.gpu_freed_bytes == 0 and r.seconds >= 0 for r in reports)  # CPU: nothing on a GPU


def test_hf_train_offload_twice_moves_nothing_the_second_time(tiny_model_dir):
    strategy = create_strategy("hf_train", "train", tiny_model_dir, optimizer=SETTINGS)
    assert strategy.offload().bytes_moved > 0
    assert strategy.offload().bytes_moved == 0
    assert strategy.reload().bytes_moved > 0
    assert strategy.reload().bytes_moved == 0


def test_hf_critic_with_offload_between_steps_equals_without(tiny_model_dir):
    def build():
        return create_strategy("hf_critic", "critic", tiny_model_dir, optimizer=SETTINGS)

    _check(build, critic=True)


def test_workers_offload_and_reload(tiny_model_dir):
    batch = {k: v for k, v in _micro_batches(0)[0].items() if k in ("input_ids", "attention_mask")}
    reference = ReferenceWorker(tiny_model_dir)
    before = reference.compute_log_probs(batch, 2)
    assert reference.offload_unavailable() is None
    assert reference.offload().bytes_moved > 0 and reference.reload().bytes_moved > 0
    assert torch.equal(reference.compute_log_probs(batch, 2), before)

    actor = ActorTrainWorker(tiny_model_dir, reference_model_path=tiny_model_dir, optimizer=SETTINGS)
    alone = ActorTrainWorker(tiny_model_dir, optimizer=SETTINGS)
    # the held reference model moves too
    assert actor.offload().bytes_moved > alone.offload().bytes_moved
    actor.reload()
    rows = {**batch, "response_mask": _micro_batches(0)[0]["response_mask"]}
    assert not math.isnan(float(actor.compute_reference_kl(rows, 2).kl.sum()))

    critic = CriticWorker(tiny_model_dir, optimizer=SETTINGS)
    assert critic.offload_unavailable() is None and critic.offload().bytes_moved > 0


@pytest.mark.deepspeed
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed extra is not installed")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_deepspeed_zero2_with_offload_between_steps_equals_without(tiny_model_dir):
    def build():
        config = {"zero_optimization": {"stage": 2}}
        return create_strategy(
            "deepspeed_train", "train", tiny_model_dir, strategy_config=config, optimizer=SETTINGS
        )

    reports = _check(build)
    assert reports[0].bytes_moved > 0


@pytest.mark.deepspeed
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="the deepspeed extra is not installed")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_deepspeed_zero0_refuses_offload_with_a_clear_message(tiny_model_dir):
    from roll_strategies import StrategyError

    strategy = create_strategy(
        "deepspeed_train", "train", tiny_model_dir, strategy_config={"zero_optimization": {"stage": 0}}
    )
    assert "ZeRO-0" in (strategy.offload_unavailable() or "")
    with pytest.raises(StrategyError, match="offload_when_colocated"):
        strategy.offload()
