"""KL control: the coefficients, the adaptive update, the reward penalty every estimator reads, `full`."""

from __future__ import annotations

import math

import pytest
import torch
from roll_algos import AdvantageConfig, compute_advantages, token_kl
from roll_pipeline.trainer.kl_control import KLControl, kl_reward_penalty
from roll_pipeline.trainer.samples import TurnView


def test_fixed_coefficients_never_move():
    kl = KLControl(0.1, 0.05, target=None, horizon=10_000)
    kl.update(5.0, 128)
    assert (kl.reward_coef, kl.loss_coef) == (0.1, 0.05)


def test_adaptive_update_is_ziegler_on_both_coefficients():
    kl = KLControl(0.1, 0.05, target=0.02, horizon=1000)
    kl.update(0.03, 100)  # error = 0.5 -> clipped to 0.2: scale *= 1 + 0.2 * 100 / 1000
    assert kl.scale == pytest.approx(1.02)
    kl.update(0.015, 100)  # error = -0.25 -> -0.2
    assert kl.scale == pytest.approx(1.02 * 0.98)
    kl.update(0.021, 50)  # error = 0.05 (inside the clip)
    assert kl.scale == pytest.approx(1.02 * 0.98 * (1 + 0.05 * 50 / 1000))
    assert kl.reward_coef == pytest.approx(0.1 * kl.scale) and kl.loss_coef == pytest.approx(0.05 * kl.scale)
    restored = KLControl(0.1, 0.05, target=0.02, horizon=1000)
    restored.load_state(kl.state())
    assert restored.scale == kl.scale


def test_adaptive_control_drives_a_toy_kl_to_its_target():
    """A KL that falls as the coefficient rises (KL = 0.1 / (1 + 20 beta)) settles near the target."""
    kl = KLControl(0.0, 0.05, target=0.03, horizon=500)
    history = []
    for _ in range(400):
        measured = 0.1 / (1 + 20 * kl.loss_coef)
        history.append(measured)
        kl.update(measured, 64)
    assert history[0] == pytest.approx(0.05)
    assert abs(history[-1] - 0.03) < 0.002


def turns() -> TurnView:
    # trajectory 0: turns 0, 1; trajectory 1: turn 2. Q = 3 tokens.
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    rewards = torch.tensor([[0.0, 0.0, 0], [0, 0, 1.0], [0.5, 0, 0]])
    return TurnView(
        response_mask=mask,
        token_rewards=rewards,
        episode_scores=torch.tensor([1.0, 1.0, 0.5]),
        step_rewards=torch.tensor([0.0, 1.0, 0.5]),
        trajectory_ids=torch.tensor([0, 0, 1]),
        group_ids=torch.tensor([0, 0, 0]),
        step_ids=torch.tensor([0, 1, 0]),
        anchor_ids=torch.tensor([-1, -1, -1]),
    )


def test_reward_penalty_reaches_token_step_and_episode_rewards():
    kl = torch.tensor([[0.1, 0.2, 9.0], [0.3, 0.0, 0.4], [0.5, 9.0, 9.0]])  # 9: off the mask, ignored
    out = kl_reward_penalty(turns(), kl, coef=0.5)
    torch.testing.assert_close(
        out.token_rewards, torch.tensor([[-0.05, -0.1, 0], [-0.15, 0, 0.8], [0.25, 0, 0]])
    )
    torch.testing.assert_close(out.step_rewards, torch.tensor([-0.15, 0.65, 0.25]))
    torch.testing.assert_close(out.episode_scores, torch.tensor([1 - 0.5, 1 - 0.5, 0.25]))


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "gae", "reinforce_plus_plus", "step_reinforce"])
def test_every_estimator_sees_the_penalty(estimator):
    t = turns()
    kl = torch.rand(t.response_mask.shape, generator=torch.Generator().manual_seed(1))
    values = torch.zeros(t.response_mask.shape)

    def advantages(view: TurnView) -> torch.Tensor:
        from roll_algos import AdvantageInputs

        inputs = AdvantageInputs(**{k: getattr(view, k) for k in view.__dataclass_fields__}, values=values)
        return compute_advantages(estimator, inputs, AdvantageConfig(gamma=1.0, norm_mode="none")).advantages

    assert not torch.allclose(advantages(t), advantages(kl_reward_penalty(t, kl, 1.0)))


def test_token_kl_estimators_and_full():
    mask = torch.tensor([[True, False, True]])
    lp, ref = torch.tensor([[-0.5, -1.0, -2.0]]), torch.tensor([[-0.7, -3.0, -1.5]])
    k3 = token_kl(lp, ref, mask, "k3")
    x = [0.2, -0.5]
    assert k3[0, 0] == pytest.approx(math.exp(-x[0]) + x[0] - 1) and k3[0, 1] == 0
    assert token_kl(lp, ref, mask, "kl")[0, 2] == pytest.approx(-0.5)
    exact = torch.tensor([[0.3, 9.0, 0.1]])  # the exact KL, computed where both models' logits are
    for kind in ("full", "full_forward"):
        torch.testing.assert_close(
            token_kl(lp, ref, mask, kind, exact=exact), torch.tensor([[0.3, 0.0, 0.1]])
        )
        with pytest.raises(ValueError, match="needs `exact`"):
            token_kl(lp, ref, mask, kind)


def test_reference_log_probs_of_the_exact_kl_pass_equal_a_separate_pass(tiny_model):
    """The train worker's exact-KL pass also gives the reference's log-probs (no second reference pass): they
    equal the reference's own log-prob pass, and the KL of a model against itself is 0."""
    from roll_strategies.compute.forward import reference_kl
    from roll_strategies.compute.recompute import batched_log_probs
    from transformers import Qwen2ForCausalLM

    policy, reference = (Qwen2ForCausalLM.from_pretrained(tiny_model(seed)).eval() for seed in (0, 1))
    ids = torch.randint(0, policy.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    attention[0, :2] = 0  # left padding
    response = torch.zeros_like(ids, dtype=torch.bool)
    response[0, 6:] = response[1, 4:7] = response[2, 8] = True
    batch = {"input_ids": ids, "attention_mask": attention, "response_mask": response}
    got = reference_kl(policy, reference, batch, micro_batch_size=2, device="cpu")
    want = batched_log_probs(reference, batch, micro_batch_size=3, device="cpu")
    torch.testing.assert_close(got.ref_log_probs[response], want[response], rtol=1e-5, atol=1e-5)
    assert bool((got.ref_log_probs[~response] == 0).all()) and bool((got.kl[~response] == 0).all())
    assert float(got.kl[response].min()) > 0 and float(got.kl_forward[response].min()) > 0
    same = reference_kl(reference, reference, batch, micro_batch_size=2, device="cpu")
    torch.testing.assert_close(same.kl, torch.zeros_like(same.kl), rtol=0, atol=1e-6)
