"""The critic: a value head on the policy's architecture, its own optimiser, padded or packed."""

from __future__ import annotations

import pytest
import torch
from roll_strategies import (
    CriticWorker,
    HFCriticStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    load_value_model,
)
from roll_strategies.compute.forward import PACK_CAPACITY_KEY

LENGTHS = [(6, 3), (10, 4), (3, 2), (14, 5)]  # (prompt, response) per row


def mse(values, mb):
    m = mb["response_mask"]
    loss = 0.5 * (values - mb["returns"])[m].square().mean()
    return loss, {"vf": float(loss.detach())}


def test_value_model_keeps_the_backbone_and_starts_at_zero(warm_model_dir, prompt_rows):
    critic, _ = load_value_model(warm_model_dir, device="cpu", dtype="float32")
    lm = HFTrainStrategy(warm_model_dir, trainable=False).model
    lm_state = lm.state_dict()
    for name, tensor in critic.model.state_dict().items():
        torch.testing.assert_close(tensor, lm_state[f"model.{name}"])
    assert float(critic.score.weight.detach().abs().sum()) == 0.0
    strategy = HFCriticStrategy(warm_model_dir)
    assert float(strategy.compute_values(prompt_rows(LENGTHS), 2).abs().sum()) == 0.0


def test_critic_fits_returns_and_packing_changes_nothing(warm_model_dir, prompt_rows):
    b = prompt_rows(LENGTHS, 1)
    returns = torch.where(b["response_mask"], torch.linspace(-1, 1, b["input_ids"].shape[1]), 0.0)
    strategies = [
        HFCriticStrategy(warm_model_dir, optimizer=OptimizerSettings(learning_rate=5e-3), seed=0)
        for _ in range(2)
    ]
    losses: list[list[float]] = [[], []]
    for _ in range(30):
        for k, capacity in enumerate((None, 20)):
            mb = {**b, "returns": returns}
            if capacity is not None:
                mb[PACK_CAPACITY_KEY] = capacity
            losses[k].append(strategies[k].train_step([mb], mse)["vf"])
    assert losses[0][-1] < 0.2 * losses[0][0]  # it learns
    # packed == padded step after step, to float noise that Adam amplifies where the loss flattens (2.5e-3 seen)
    assert losses[1] == pytest.approx(losses[0], rel=5e-3, abs=1e-5)
    assert strategies[0].packing_supported()
    values = strategies[0].compute_values(b, 3)
    assert bool((values[~b["response_mask"]] == 0).all())


def test_critic_checkpoint_round_trip(warm_model_dir, tmp_path, prompt_rows):
    b = prompt_rows(LENGTHS, 2)
    worker = CriticWorker(warm_model_dir, optimizer=OptimizerSettings(learning_rate=1e-2))
    worker.train_step([{**b, "returns": torch.ones(b["input_ids"].shape)}], mse)
    worker.save_checkpoint(tmp_path / "critic")
    before = worker.compute_values(b, 4)
    assert float(before.abs().sum()) > 0
    fresh = CriticWorker(tmp_path / "critic")  # a critic folder keeps its trained head
    torch.testing.assert_close(fresh.compute_values(b, 4), before)
    other = CriticWorker(warm_model_dir)
    other.load_checkpoint(tmp_path / "critic")
    torch.testing.assert_close(other.compute_values(b, 4), before)
    assert other.strategy.step == 1
