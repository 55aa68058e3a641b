"""The config's `policy_loss`: any name registered in roll-algos reaches the actor loss; an unknown name and a
loss setting the named loss would ignore are config errors that say the fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from roll_algos import (
    POLICY_LOSSES,
    PolicyLossConfig,
    PolicyLossInputs,
    PolicyLossOutput,
    get_policy_loss,
    register_policy_loss,
)
from roll_pipeline.assembly.settings import actor_loss
from roll_pipeline.config.compose import ConfigError, compose, tiny_config


def doubled_ppo(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
    """Twice the ppo loss."""
    out = get_policy_loss("ppo")(inputs, config)
    return out._replace(loss=out.loss * 2)


@pytest.fixture
def doubled() -> Iterator[str]:
    register_policy_loss("test_doubled_ppo", replace=True)(doubled_ppo)
    yield "test_doubled_ppo"
    POLICY_LOSSES.pop("test_doubled_ppo", None)


def _loss(policy_loss: str, **fields) -> float:
    cfg = tiny_config(policy_loss=policy_loss, use_kl_loss=False, skip_confident_tokens=None, **fields)
    mask = torch.tensor([[False, True, True, True], [True, True, False, False]])
    old = torch.log(torch.tensor([[1.0, 0.5, 0.25, 0.4], [0.3, 0.6, 1.0, 1.0]]))
    mb = {
        "response_mask": mask,
        "old_log_probs": old,
        "advantages": torch.tensor([[0.0, 1.0, 1.0, 1.0], [-1.0] * 4]),
    }
    loss, _ = actor_loss(cfg, 0.0)(
        old + torch.tensor([[0.0, 0.1, -0.05, 0.02], [0.3, -0.1, 0.0, 0.0]]), None, mb
    )
    return float(loss)


def test_the_default_is_ppo_and_gspo_is_a_name_away():
    assert tiny_config().policy_loss == "ppo"
    gspo = _loss("gspo", pg_clip_low=3e-4, pg_clip_high=4e-4)
    assert gspo == pytest.approx(_loss("ppo", ratio_level="sequence", pg_clip_low=3e-4, pg_clip_high=4e-4))
    assert abs(gspo - _loss("ppo")) > 1e-3


def test_a_registered_name_reaches_the_actor_loss(doubled):
    assert _loss(doubled) == pytest.approx(2 * _loss("ppo"))


def test_an_unknown_policy_loss_lists_the_registered_ones():
    with pytest.raises(ConfigError) as err:
        compose(None, None, ["policy_loss=gpso"])
    text = str(err.value)
    assert "policy_loss: " in text and "Did you mean 'gspo'" in text and "'ppo'" in text
    assert "register_policy_loss" in text and "roll_algos.policy_losses" in text


@pytest.mark.parametrize("setting", ["dual_clip_loss=true", "ratio_level=segment"])
def test_a_setting_gspo_would_ignore_is_refused(setting):
    with pytest.raises(
        ConfigError, match=r"policy_loss='gspo' does not read it.*set policy_loss to one that reads it: ppo"
    ):
        compose(None, None, ["policy_loss=gspo", setting])


def test_gspo_with_skipped_tokens_or_a_ppo_sized_clip_is_refused_with_the_papers_range():
    """roll_tiny skips confident tokens (0.99) and clips at PPO's 0.2: GSPO's sequence ratio would then average
    the kept tokens only, and would almost never clip."""
    with pytest.raises(ConfigError) as err:
        compose(None, None, ["policy_loss=gspo"])
    text = str(err.value)
    assert (
        "skip_confident_tokens=0.99 with gspo's sequence ratio" in text
        and "skip_confident_tokens=null" in text
    )
    assert "(low 0.2, high 0.2)" in text and "pg_clip_low=0.0003, pg_clip_high=0.0004" in text
    with pytest.raises(ConfigError, match="ratio_level=segment's ratio"):
        compose(None, None, ["ratio_level=segment"])
    ok = ["policy_loss=gspo", "skip_confident_tokens=null", "pg_clip_low=3e-4", "pg_clip_high=4e-4"]
    assert compose(None, None, ok).policy_loss == "gspo"
