"""The policy-loss registry: the builtins, `ActorLoss` looking its loss up by name, entry-point plugins,
and refusals that say the fix (unknown names, wrong call shapes, settings a loss would ignore)."""

from __future__ import annotations

import dataclasses
import sys
import warnings

import pytest
import torch
from roll_algos import (
    DEFAULT_POLICY_LOSS,
    POLICY_LOSSES,
    ActorLoss,
    AlgosError,
    PolicyLossConfig,
    PolicyLossInputs,
    PolicyLossOutput,
    compute_policy_loss,
    get_policy_loss,
    policy_loss,
    policy_loss_spec,
    register_policy_loss,
    registered_policy_losses,
)
from roll_algos import policy_losses as policy_losses_module


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[True, True, True, False], [False, True, True, True]])
    old = -torch.rand(2, 4, generator=g)
    return {"response_mask": mask, "old_log_probs": old, "advantages": torch.randn(2, 4, generator=g)}


def half_ppo(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
    """Half of the ppo loss (a loss whose result is easy to recognise)."""
    out = get_policy_loss("ppo")(inputs, config)
    return out._replace(loss=out.loss / 2)


def test_the_builtins_and_the_default():
    assert DEFAULT_POLICY_LOSS == "ppo" and ActorLoss().policy_loss == "ppo"
    assert {"ppo", "gspo"} <= set(registered_policy_losses())
    assert policy_loss_spec("ppo").options == ("dual_clip", "ratio_level")
    assert policy_loss_spec("ppo").description.startswith("PPO clipped surrogate")


def test_actor_loss_runs_the_default_exactly_as_policy_loss():
    mb = _batch()
    log_probs = mb["old_log_probs"] + 0.3
    loss, metrics = ActorLoss(clip_low=0.1, clip_high=0.28, dual_clip=3.0)(log_probs, None, mb)
    direct = policy_loss(
        log_probs,
        mb["old_log_probs"],
        mb["advantages"],
        mb["response_mask"],
        clip_low=0.1,
        clip_high=0.28,
        dual_clip=3.0,
        norm_constant=2.0,
    )
    assert torch.equal(loss, direct.loss) and metrics["actor/pg_clipfrac"] == float(direct.clip_frac)


def test_actor_loss_runs_gspo_by_name():
    mb = _batch()
    log_probs = mb["old_log_probs"] + torch.tensor([[0.01, -0.02, 0.0, 0.0], [0.0, 0.2, 0.1, 0.0]])
    loss, metrics = ActorLoss(policy_loss="gspo", clip_low=3e-4, clip_high=4e-4)(log_probs, None, mb)
    inputs = PolicyLossInputs(log_probs, mb["old_log_probs"], mb["advantages"], mb["response_mask"])
    direct = get_policy_loss("gspo")(
        inputs, PolicyLossConfig(clip_low=3e-4, clip_high=4e-4, norm_constant=2.0)
    )
    assert torch.equal(loss, direct.loss) and metrics["actor/ratio_max"] == float(direct.ratio_max)


def test_a_new_loss_registers_and_actor_loss_uses_it(scratch_names):
    scratch_names.append("half_ppo")
    register_policy_loss("half_ppo", options=("dual_clip", "ratio_level"))(half_ppo)
    mb = _batch()
    log_probs = mb["old_log_probs"] + 0.1
    half, _ = ActorLoss(policy_loss="half_ppo")(log_probs, None, mb)
    full, _ = ActorLoss()(log_probs, None, mb)
    assert float(half) == pytest.approx(float(full) / 2)
    spec = policy_loss_spec("half_ppo")
    assert (spec.fn, spec.description) == (half_ppo, half_ppo.__doc__)


def test_unknown_name_lists_the_registered_ones_and_how_to_register():
    for attempt in (lambda: get_policy_loss("gpso"), lambda: ActorLoss(policy_loss="gpso")):
        with pytest.raises(AlgosError) as err:
            attempt()
        text = str(err.value)
        assert "Did you mean 'gspo'" in text and "'ppo'" in text and "'gspo'" in text
        assert "register_policy_loss" in text and "roll_algos.policy_losses" in text


def test_wrong_call_shapes_and_declarations_are_refused(scratch_names):
    scratch_names.append("bad")

    def one_arg(inputs):  # type: ignore[no-untyped-def]
        return inputs

    def verl_style(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):  # type: ignore[no-untyped-def]
        return old_log_prob

    async def coroutine(inputs, config):  # type: ignore[no-untyped-def]
        return inputs

    for fn in (one_arg, verl_style):
        with pytest.raises(AlgosError, match=r"cannot be called as fn\(inputs, config\).*PolicyLossInputs"):
            register_policy_loss("bad")(fn)
    for fn in (coroutine, 3, PolicyLossOutput):
        with pytest.raises(AlgosError, match=r"expected a function fn\(inputs, config\) -> PolicyLossOutput"):
            register_policy_loss("bad")(fn)  # type: ignore[arg-type]
    with pytest.raises(AlgosError, match="options must be a tuple of"):
        register_policy_loss("bad", options=("clip_low",))
    with pytest.raises(AlgosError, match="expected a name"):
        register_policy_loss("no spaces")
    with pytest.raises(AlgosError, match=r"'ppo' is already registered .*replace=True"):
        register_policy_loss("ppo")(half_ppo)
    assert "bad" not in POLICY_LOSSES and policy_loss_spec("ppo").fn is not half_ppo


def test_a_setting_the_loss_does_not_read_is_refused():
    with pytest.raises(AlgosError, match=r"'gspo' does not read \['dual_clip'\].*\['ppo'\]"):
        ActorLoss(policy_loss="gspo", dual_clip=3.0)
    with pytest.raises(AlgosError, match=r"does not read \['ratio_level'\]"):
        ActorLoss(policy_loss="gspo", ratio_level="sequence")
    with pytest.raises(AlgosError, match="does not read"):
        inputs = PolicyLossInputs(*(torch.zeros(1, 2) for _ in range(3)), torch.ones(1, 2, dtype=torch.bool))
        compute_policy_loss("gspo", inputs, PolicyLossConfig(ratio_level="segment"))


def test_a_loss_must_return_a_policy_loss_output(scratch_names):
    scratch_names.append("returns_a_tensor")
    register_policy_loss("returns_a_tensor")(lambda inputs, config: inputs.log_probs.sum())
    mb = _batch()
    with pytest.raises(
        AlgosError, match=r"returned Tensor; a policy loss returns roll_algos\.PolicyLossOutput"
    ):
        ActorLoss(policy_loss="returns_a_tensor")(mb["old_log_probs"], None, mb)


def test_entry_point_plugins_load_and_actor_loss_uses_them(plug_in, scratch_names):
    scratch_names.append("plugged_half")
    plug_in(
        policy_losses_module.POLICY_LOSS_REGISTRY,
        "plugged_losses",
        "from roll_algos import get_policy_loss, register_policy_loss\n"
        "CALLS = []\n"
        "@register_policy_loss('plugged_half')\n"
        "def plugged_half(inputs, config):\n"
        "    '''Half of ppo.'''\n"
        "    CALLS.append(config)\n"
        "    out = get_policy_loss('ppo')(inputs, config)\n"
        "    return out._replace(loss=out.loss / 2)\n",
    )
    with pytest.warns(UserWarning, match="policy loss plugin 'broken'"):
        objective = ActorLoss(policy_loss="plugged_half", clip_high=0.28)  # a miss loads the plugins
    mb = _batch()
    log_probs = mb["old_log_probs"] + 0.1
    half, _ = objective(log_probs, None, mb)
    full, _ = dataclasses.replace(objective, policy_loss="ppo")(log_probs, None, mb)
    assert float(half) == pytest.approx(float(full) / 2)
    assert [c.clip_high for c in sys.modules["plugged_losses"].CALLS] == [0.28]
    with pytest.raises(AlgosError, match=r"plugins that failed to load: \['broken'\]"):
        get_policy_loss("still_missing")


def test_sft_is_the_cross_entropy_of_the_response_tokens():
    # reference: torch's cross_entropy on the logits, averaged per row then over rows (seq-mean-token-mean)
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 7, (3, 5))
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 1, 1], [1, 0, 1, 0, 1]], dtype=torch.bool)
    log_probs = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    log_probs = torch.where(mask, log_probs, torch.full_like(log_probs, float("-inf")))  # padding: -inf
    inputs = PolicyLossInputs(
        log_probs, torch.zeros_like(log_probs), torch.randn(3, 5, dtype=torch.float64), mask
    )
    out = compute_policy_loss("sft", inputs)
    (grad,) = torch.autograd.grad(out.loss, logits)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    reference = torch.stack([ce[i][mask[i]].mean() for i in range(3)]).mean()
    (ref_grad,) = torch.autograd.grad(reference, logits)
    assert torch.allclose(out.loss, reference) and torch.allclose(grad, ref_grad)
    assert out.clip_frac == 0 and torch.isfinite(grad).all()


def test_sft_ignores_the_advantages():
    torch.manual_seed(1)
    log_probs = -torch.rand(2, 4, dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    losses = [
        compute_policy_loss("sft", PolicyLossInputs(log_probs, log_probs, adv, mask)).loss
        for adv in (torch.ones(2, 4, dtype=torch.float64), -5 * torch.ones(2, 4, dtype=torch.float64))
    ]
    assert torch.equal(losses[0], losses[1]) and torch.isclose(losses[0], -log_probs.mean())


@pytest.mark.parametrize(
    ("loss", "level", "says"),
    [("gspo", "token", "gspo's sequence ratio"), ("ppo", "sequence", "ratio_level=sequence's ratio")],
)
def test_a_ratio_averaged_over_tokens_refuses_skipped_tokens(loss, level, says):
    with pytest.raises(AlgosError, match=f"skip_confident_tokens=0.99 with {says}"):
        ActorLoss(
            policy_loss=loss, ratio_level=level, skip_confident_tokens=0.99, clip_low=3e-4, clip_high=4e-4
        )
    ActorLoss(policy_loss="ppo", skip_confident_tokens=0.99)  # per-token ratios: each token stands alone


def test_gspo_warns_at_a_clip_range_far_above_the_papers():
    with pytest.warns(UserWarning, match=r"\(low 0.2, high 0.2\).*low 0.0003, high 0.0004"):
        ActorLoss(policy_loss="gspo")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ActorLoss(policy_loss="gspo", clip_low=3e-4, clip_high=4e-4)


def test_turn_max_entropy_is_the_mean_of_each_turns_most_uncertain_token():
    from roll_algos.objectives import turn_max_entropy

    entropy = torch.tensor([[9.0, 0.5, 2.0, 0.1, 1.0], [0.2, 0.3, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[False, True, True, True, True], [True, True, False, False, False]])
    # row 0 holds two turns (segments 1: tokens 1-2, 2: tokens 3-4), row 1 one; off-mask 9s never count
    segments = torch.tensor([[0, 1, 1, 2, 2], [1, 1, 0, 0, 0]])
    assert turn_max_entropy(entropy, mask, segments) == pytest.approx((2.0 + 1.0 + 0.3) / 3)
    assert turn_max_entropy(entropy, mask, None) == pytest.approx((2.0 + 0.3) / 2)
    _, metrics = ActorLoss()(
        torch.zeros(2, 5),
        entropy,
        {
            "response_mask": mask,
            "old_log_probs": torch.zeros(2, 5),
            "advantages": torch.ones(2, 5),
            "segment_ids": segments,
        },
    )
    assert metrics["actor/entropy/turn_max"] == pytest.approx(3.3 / 3)


def test_turns_not_greedy_counts_each_turn_with_a_token_off_the_argmax_once():
    from roll_algos.objectives import turns_not_greedy

    # row 0: two turns (segment 1: tokens 1-2, both argmax; segment 2: tokens 3-4, both off it); row 1: one
    # turn, its second token off the argmax; the off-mask 0s never count
    greedy = torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[False, True, True, True, True], [True, True, False, False, False]])
    segments = torch.tensor([[0, 1, 1, 2, 2], [1, 1, 0, 0, 0]])
    assert turns_not_greedy(greedy, mask, segments) == pytest.approx(2 / 3)
    assert turns_not_greedy(greedy, mask, None) == pytest.approx(2 / 2)
    assert turns_not_greedy(torch.ones(2, 5), mask, segments) == 0.0
    batch = {"response_mask": mask, "old_log_probs": torch.zeros(2, 5), "advantages": torch.ones(2, 5)}
    _, metrics = ActorLoss()(
        torch.zeros(2, 5), torch.ones(2, 5), {**batch, "segment_ids": segments, "greedy": greedy}
    )
    assert metrics["actor/sampled_not_greedy"] == pytest.approx(2 / 3)
    _, metrics = ActorLoss()(torch.zeros(2, 5), torch.ones(2, 5), batch)
    assert "actor/sampled_not_greedy" not in metrics  # no argmax column, no metric (not a 0)
