"""The estimator registry: new names, declarations, refusals that say the fix, and entry-point plugins."""

from __future__ import annotations

import pytest
import torch
from roll_algos import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutput,
    AlgosError,
    compute_advantages,
    estimator_spec,
    register_estimator,
    registered_estimators,
)
from roll_algos import registry as registry_module


def raw_score(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """The episode score on every response token, discounted by nothing."""
    adv = inputs.episode_scores[:, None] * inputs.response_mask
    return AdvantageOutput(adv, adv.clone())


def test_builtins_declare_what_they_need():
    assert set(AdvantageEstimator) <= set(registered_estimators())
    assert [n for n in AdvantageEstimator if estimator_spec(n).needs_critic] == ["gae"]
    gigpo = estimator_spec("gigpo")
    assert (gigpo.level, gigpo.group_based) == ("step", True)
    assert "gigpo_step_weight" in gigpo.options and "gigpo_anchor_threshold" in gigpo.options
    assert (estimator_spec("grpo").level, estimator_spec("gae").level) == ("trajectory", "token")
    assert not estimator_spec("agentic_reinforce").group_based
    assert estimator_spec("grpo").description.startswith("GRPO")


def test_a_new_name_registers_and_runs(make_rows, scratch_names):
    scratch_names.append("raw_score")
    register_estimator("raw_score", level="trajectory", group_based=False)(raw_score)
    assert "raw_score" in registered_estimators()
    inp = make_rows(0)
    out = compute_advantages("raw_score", inp, AdvantageConfig(advantage_clip=0.5))
    expected = (inp.episode_scores[:, None] * inp.response_mask).clamp(-0.5, 0.5)
    torch.testing.assert_close(out.advantages, expected)
    spec = estimator_spec("raw_score")
    assert (spec.fn, spec.needs_critic, spec.description) == (raw_score, False, raw_score.__doc__)


def test_a_taken_name_needs_replace(scratch_names):
    scratch_names.append("raw_twice")
    register_estimator("raw_twice", level="trajectory", group_based=False)(raw_score)
    register_estimator("raw_twice", level="trajectory", group_based=False)(raw_score)  # the same fn: fine

    def other(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
        return raw_score(inputs, config)

    with pytest.raises(AlgosError, match=r"'raw_twice' is already registered .*replace=True"):
        register_estimator("raw_twice", level="step", group_based=False)(other)
    with pytest.raises(AlgosError, match="already registered"):
        register_estimator("grpo", level="trajectory", group_based=True)(other)
    register_estimator("raw_twice", level="step", group_based=False, replace=True)(other)
    assert estimator_spec("raw_twice").fn is other


def test_wrong_shapes_and_declarations_are_refused(scratch_names):
    scratch_names.append("bad")

    def one_arg(inputs):  # type: ignore[no-untyped-def]
        return inputs

    def three_args(inputs, config, extra):  # type: ignore[no-untyped-def]
        return inputs

    async def coroutine(inputs, config):  # type: ignore[no-untyped-def]
        return inputs

    for fn in (one_arg, three_args):
        with pytest.raises(AlgosError, match=r"cannot be called as fn\(inputs, config\)"):
            register_estimator("bad", level="step", group_based=False)(fn)
    for fn in (coroutine, 3, AdvantageOutput):
        with pytest.raises(AlgosError, match="expected a function"):
            register_estimator("bad", level="step", group_based=False)(fn)  # type: ignore[arg-type]
    with pytest.raises(AlgosError, match="expected level in"):
        register_estimator("bad", level="episode", group_based=False)  # type: ignore[arg-type]
    with pytest.raises(AlgosError, match="options must be a tuple of AdvantageConfig fields"):
        register_estimator("bad", level="step", group_based=False, options=("omega",))
    with pytest.raises(AlgosError, match="expected a name"):
        register_estimator("no spaces", level="step", group_based=False)
    assert "bad" not in ADVANTAGE_ESTIMATORS


def test_unknown_name_lists_the_registered_ones_and_how_to_register():
    with pytest.raises(AlgosError) as err:
        compute_advantages("gpro", None)  # type: ignore[arg-type]
    text = str(err.value)
    assert "Did you mean 'grpo'" in text and "'gigpo'" in text and "'step_reinforce'" in text
    assert "register_estimator" in text and "roll_algos.estimators" in text


def test_entry_point_plugins_load_and_a_broken_one_is_reported(plug_in, scratch_names):
    scratch_names.append("plugged_raw")
    plug_in(
        registry_module.ESTIMATOR_REGISTRY,
        "plugged_estimators",
        "from roll_algos import AdvantageOutput, register_estimator\n"
        "@register_estimator('plugged_raw', level='trajectory', group_based=False)\n"
        "def plugged_raw(inputs, config):\n"
        "    adv = inputs.episode_scores[:, None] * inputs.response_mask\n"
        "    return AdvantageOutput(adv, adv.clone())\n",
    )
    with pytest.warns(UserWarning, match="'broken'"):
        spec = estimator_spec("plugged_raw")  # a miss loads the plugins
    assert spec.level == "trajectory"
    with pytest.raises(AlgosError, match=r"plugins that failed to load: \['broken'\]"):
        estimator_spec("still_missing")
