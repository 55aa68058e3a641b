from __future__ import annotations

import math

import pytest
import torch
from roll_algos import ActorLoss
from roll_algos.errors import AlgosError


def _batch():
    # 2 rows x 4 tokens; row 0: a confident tag (p=0.999), a decision (p=0.25), a confident tag;
    # row 1: only confident tokens -> no decision token at all
    old = torch.log(torch.tensor([[1.0, 0.999, 0.25, 0.995], [1.0, 0.999, 0.999, 1.0]]))
    mask = torch.tensor([[False, True, True, True], [False, True, True, False]])
    adv = torch.tensor([[0.0, 5.0, -2.0, 7.0], [0.0, 3.0, 3.0, 0.0]])
    return {"response_mask": mask, "old_log_probs": old, "advantages": adv}


def test_confident_tokens_leave_the_policy_gradient_term():
    mb = _batch()
    log_probs = mb["old_log_probs"].clone()  # ratio 1: each token's PPO loss is -advantage
    loss, metrics = ActorLoss(skip_confident_tokens=0.99)(log_probs, None, mb)
    # only row 0's decision token (-(-2)); row 1 has none and counts 0 in the mean over the micro-batch's 2 rows
    # with a response (the units loss_scale shares out, so the cuts into micro-batches change nothing)
    assert float(loss) == pytest.approx(2.0 / 2)
    assert metrics["actor/pg_token_frac"] == pytest.approx(1 / 5)
    everything, metrics = ActorLoss()(log_probs, None, mb)
    # seq-mean-token-mean over every response token: rows (-(5 - 2 + 7) / 3, -(3 + 3) / 2)
    assert float(everything) == pytest.approx((-10 / 3 - 3) / 2)
    assert metrics["actor/pg_token_frac"] == 1.0


def test_the_threshold_is_a_probability():
    mb = _batch()
    loss, metrics = ActorLoss(skip_confident_tokens=0.996)(mb["old_log_probs"].clone(), None, mb)
    # p=0.995 is now below the threshold and trains; 0.999 still does not
    assert metrics["actor/pg_token_frac"] == pytest.approx(2 / 5)
    assert float(loss) == pytest.approx(-(-2.0 + 7.0) / 2 / 2)  # row 1 counts 0 over the 2 rows
    assert math.log(0.996) > float(mb["old_log_probs"][0, 3])


def test_kl_term_still_covers_every_response_token():
    mb = _batch()
    mb["ref_log_probs"] = mb["old_log_probs"] - 0.5  # the reference is off everywhere
    log_probs = mb["old_log_probs"].clone()
    _, with_skip = ActorLoss(skip_confident_tokens=0.99, kl_loss_coef=0.1)(log_probs, None, mb)
    _, without = ActorLoss(kl_loss_coef=0.1)(log_probs, None, mb)
    assert (
        with_skip["actor/kl_loss"] == pytest.approx(without["actor/kl_loss"])
        and with_skip["actor/kl_loss"] > 0
    )


def test_tis_weights_each_token_by_the_truncated_train_inference_ratio():
    mb = _batch()
    old = mb["old_log_probs"]
    ln2 = math.log(2.0)
    # weights exp(old - rollout): row 0 -> [_, 2, 2, 1] (2 truncated to 1.5), row 1 -> [_, 0.5, 1, _]
    mb["rollout_log_probs"] = old - torch.tensor([[0.0, ln2, ln2, 0.0], [0.0, -ln2, 0.0, 0.0]])
    loss, metrics = ActorLoss(tis_cap=1.5)(old.clone(), None, mb)  # ratio 1: token loss = -A * w
    row0 = -(5.0 * 1.5 - 2.0 * 1.5 + 7.0 * 1.0) / 3
    row1 = -(3.0 * 0.5 + 3.0 * 1.0) / 2
    assert float(loss) == pytest.approx((row0 + row1) / 2)
    assert metrics["actor/tis_weight_mean"] == pytest.approx((1.5 + 1.5 + 1.0 + 0.5 + 1.0) / 5)
    plain, plain_metrics = ActorLoss()(old.clone(), None, mb)  # without tis_cap the weights are ignored
    assert float(plain) == pytest.approx((-10 / 3 - 3) / 2) and "actor/tis_weight_mean" not in plain_metrics


def test_by_reference_the_reference_models_confidence_picks_the_tokens():
    mb = _batch()
    # the policy grew sure of row 0's decision (0.25 -> 0.999); the reference still gives it 0.25, and
    # gives row 0's last tag 0.5 (a token the policy is sure of, the reference not)
    mb["ref_log_probs"] = mb["old_log_probs"].clone()
    mb["ref_log_probs"][0, 3] = math.log(0.5)
    mb["old_log_probs"][0, 2] = math.log(0.999)
    log_probs = mb["old_log_probs"].clone()  # ratio 1: each token's PPO loss is -advantage
    by_sampler, sampler_metrics = ActorLoss(skip_confident_tokens=0.99)(log_probs, None, mb)
    assert sampler_metrics["actor/pg_token_frac"] == 0.0 and float(by_sampler) == 0.0  # nothing left to train
    by_reference, metrics = ActorLoss(skip_confident_tokens=0.99, skip_confident_by="reference")(
        log_probs, None, mb
    )
    assert metrics["actor/pg_token_frac"] == pytest.approx(2 / 5)  # row 0's decision and last tag
    assert float(by_reference) == pytest.approx(-(-2.0 + 7.0) / 2 / 2)
    with pytest.raises(ValueError, match="ref_log_probs"):
        ActorLoss(skip_confident_tokens=0.99, skip_confident_by="reference")(log_probs, None, _batch())


def test_entropy_scope_decision_averages_the_bonus_over_the_decision_tokens_only():
    mb = _batch()
    log_probs = mb["old_log_probs"].clone()
    entropy = torch.tensor([[9.0, 0.1, 1.2, 0.3], [9.0, 0.2, 0.4, 9.0]])  # masked positions hold 9
    _, everywhere = ActorLoss(skip_confident_tokens=0.99)(log_probs, entropy, mb)
    assert everywhere["actor/entropy"] == pytest.approx(((0.1 + 1.2 + 0.3) / 3 + (0.2 + 0.4) / 2) / 2)
    loss, decision = ActorLoss(skip_confident_tokens=0.99, entropy_scope="decision", entropy_loss_coef=0.5)(
        log_probs, entropy, mb
    )
    assert decision["actor/entropy"] == pytest.approx(1.2)  # row 0's one decision token; row 1 has none
    assert float(loss) == pytest.approx((2.0 - 0.5 * 1.2) / 2)  # both terms over the 2 rows with a response


def test_entropy_scope_turn_max_covers_each_turns_most_uncertain_token_however_sure():
    mb = _batch()
    log_probs = mb["old_log_probs"].clone()  # ratio 1: each token's PPO loss is -advantage
    entropy = torch.tensor([[9.0, 0.1, 1.2, 0.3], [9.0, 0.2, 0.4, 9.0]], requires_grad=True)
    loss, metrics = ActorLoss(entropy_scope="turn_max", entropy_loss_coef=0.5)(log_probs, entropy, mb)
    # the bonus: row 0's 1.2 and row 1's 0.4 (a token the sampler drew at p=0.999, which decision drops)
    assert metrics["actor/entropy"] == pytest.approx((1.2 + 0.4) / 2)
    assert float(loss.detach()) == pytest.approx((-10 / 3 - 3) / 2 - 0.5 * (1.2 + 0.4) / 2)
    loss.backward()
    expected = torch.zeros(2, 4)
    expected[0, 2] = expected[1, 2] = -0.5 / 2  # d loss / d entropy: only the two peaks, each row's mean of 1
    assert torch.equal(entropy.grad, expected)


def test_turn_peak_tokens_picks_one_token_per_turn_the_first_of_a_tie():
    from roll_algos.objectives import turn_peak_tokens

    entropy = torch.tensor([[0.0, 0.5, 0.7, 0.3, 0.3, 2.0], [0.4, 0.4, 0.1, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[False, True, True, True, True, False], [True, True, True, False, False, False]])
    segments = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 1, 1, 0, 0, 0]])  # row 0: two turns; row 1: one
    peaks = turn_peak_tokens(entropy, mask, segments)
    assert peaks.nonzero().tolist() == [[0, 2], [0, 3], [1, 0]]  # 2.0 is off the response; ties: the first
    assert turn_peak_tokens(entropy, mask, None).nonzero().tolist() == [[0, 2], [1, 0]]  # a row, one turn
    assert not turn_peak_tokens(entropy, torch.zeros_like(mask), None).any()


def test_an_unknown_entropy_scope_is_refused():
    with pytest.raises(AlgosError, match="entropy_scope must be one of"):
        ActorLoss(entropy_scope="decisions")
