"""Open estimator registry in the pipeline: a custom estimator registered here passes `roll config` and trains
through the step's advantage path; unknown names are refused with the list; GiGPO's options reach it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from roll_algos import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    AdvantageOutput,
    register_estimator,
)
from roll_pipeline.assembly.settings import experience_settings
from roll_pipeline.config.compose import ConfigError, compose, tiny_config
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.trainer.experience import step_advantages
from roll_pipeline.trainer.samples import Samples, build_samples
from roll_rollout import Trajectory, Turn

R = 1 / math.sqrt(2)


def raw_score(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """The episode score times gamma on every response token (no baseline)."""
    adv = config.gamma * inputs.episode_scores[:, None] * inputs.response_mask
    return AdvantageOutput(adv, adv.clone())


@pytest.fixture
def custom_estimators() -> Iterator[None]:
    """`test_raw_score` (no critic) and `test_raw_critic` (declares a critic), removed afterwards."""
    register_estimator("test_raw_score", level="trajectory", group_based=False, replace=True)(raw_score)
    register_estimator("test_raw_critic", level="token", group_based=False, needs_critic=True, replace=True)(
        raw_score
    )
    yield
    for name in ("test_raw_score", "test_raw_critic"):
        ADVANTAGE_ESTIMATORS.pop(name)


def trajectory(group: int, env: int, steps: list[tuple[str, float]]) -> Trajectory:
    """One episode: a turn per (observation, reward), each a 2-token prompt and a 1-token response."""
    traj = Trajectory(env_id=env, group_id=group, episode_id=env, tag="FrozenLake", seed=group)
    traj.turns = [Turn([1, 2], [3], [-0.5], reward, True, True, obs) for obs, reward in steps]
    return traj


def example() -> Samples:
    """roll_algos' GiGPO example as trajectories. Group 0: A visits s10, s20, s30 (rewards 0, 0, 1), B visits
    s10, s40, s20 (all 0); group 1: C visits s10 (reward 1). s30 and s40 are similar texts (Jaccard 0.6)."""
    s10, s20, s30, s40 = "a b c d", "p q r s", "x y z w", "x y z v"
    trajs = [
        trajectory(0, 0, [(s10, 0.0), (s20, 0.0), (s30, 1.0)]),
        trajectory(0, 1, [(s10, 0.0), (s40, 0.0), (s20, 0.0)]),
        trajectory(1, 2, [(s10, 1.0)]),
    ]
    return build_samples(trajs, pad_id=0, shape="step")


def advantages(config: AgenticConfig) -> list[float]:
    """The step's advantages (one per row: every row has one response token) with `config`'s settings."""
    settings = experience_settings(config)
    samples = example()
    adv, _ = step_advantages(samples, settings.adv_estimator, settings.advantage)
    return adv[samples.response_mask].tolist()


def test_a_custom_estimator_passes_config_and_trains_through_the_advantage_path(custom_estimators):
    config = compose(None, None, ["adv_estimator=test_raw_score", "gamma=0.5", "whiten_advantages=false"])
    assert config.adv_estimator == "test_raw_score" and not config.uses_critic
    # rows: A0 A1 A2 (score 1), B0 B1 B2 (score 0), C0 (score 1)
    assert advantages(config) == pytest.approx([0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.5])
    # the advantage clip of the config applies to it like to every estimator
    clipped = config.model_copy(update={"advantage_clip": 0.25})
    assert advantages(clipped) == pytest.approx([0.25, 0.25, 0.25, 0.0, 0.0, 0.0, 0.25])


def test_what_the_estimator_declares_decides_the_critic(custom_estimators):
    assert tiny_config(adv_estimator="test_raw_critic", critic_warmup=2).uses_critic
    assert tiny_config(adv_estimator="gae").uses_critic
    with pytest.raises(
        ValueError, match=r"critic_warmup set, but only adv_estimator=gae/test_raw_critic uses"
    ):
        tiny_config(adv_estimator="test_raw_score", critic_warmup=2)


def test_an_unknown_estimator_is_refused_with_the_registered_names():
    with pytest.raises(ConfigError) as err:
        compose(None, None, ["adv_estimator=gpro"])
    text = str(err.value)
    assert "adv_estimator: " in text and "Did you mean 'grpo'" in text
    assert "'gigpo'" in text and "'agentic_reinforce'" in text and "'gae'" in text
    assert "register_estimator" in text and "roll_algos.estimators" in text


def test_default_gigpo_options_are_the_estimator_defaults():
    for config in (AgenticConfig(pretrain="x"), tiny_config()):
        adv = experience_settings(config).advantage
        default = AdvantageConfig()
        for name in (
            "gigpo_step_weight",
            "gigpo_norm_mode",
            "gigpo_anchor_threshold",
            "gigpo_anchor_similarity",
        ):
            assert getattr(adv, name) == getattr(default, name), name


def gigpo(**fields: object) -> AgenticConfig:
    return tiny_config(adv_estimator="gigpo", gamma=0.5, whiten_advantages=False, **fields)


def test_gigpo_options_change_the_advantages_as_hand_computed():
    # See roll_algos test_gigpo: A_E = +-1/sqrt(2) in group 0, 0 for C (alone in group 1). Step returns
    # (gamma 0.5) A: 0.25, 0.5, 1; B: 0, 0, 0. Anchor groups {s10: A0, B0}, {s20: A1, B2} give +-1/sqrt(2);
    # s30 (A2) and s40 (B1) are singletons (0) unless merged by similarity.
    # rows: A0 A1 A2 B0 B1 B2 C0
    exact = [2 * R, 2 * R, R, -2 * R, -R, -2 * R, 0.0]
    assert advantages(gigpo()) == pytest.approx(exact, rel=1e-5)
    # omega 0: the episode advantage alone
    assert advantages(gigpo(gigpo_step_weight=0.0)) == pytest.approx([R] * 3 + [-R] * 3 + [0.0], rel=1e-5)
    # mean-only, omega 0.5: A_E = +-0.5; s10: 0.25 - 0.125 = +-0.125; s20: +-0.25; x 0.5
    mean = [0.5625, 0.625, 0.5, -0.5625, -0.5, -0.625, 0.0]
    assert advantages(gigpo(gigpo_norm_mode="mean", gigpo_step_weight=0.5)) == pytest.approx(mean)
    # similarity anchors: s30 ~ s40 (Jaccard 0.6 >= 0.5) -> {A2: 1, B1: 0} -> +-1/sqrt(2)
    merged = [2 * R, 2 * R, 2 * R, -2 * R, -2 * R, -2 * R, 0.0]
    assert advantages(gigpo(gigpo_anchor_threshold=0.5)) == pytest.approx(merged, rel=1e-5)
    assert advantages(gigpo(gigpo_anchor_threshold=0.7)) == pytest.approx(exact, rel=1e-5)
    # difflib ratio of s30, s40 is 12 / 14 = 0.857
    by_ratio = gigpo(gigpo_anchor_threshold=0.8, gigpo_anchor_similarity="difflib")
    assert advantages(by_ratio) == pytest.approx(merged, rel=1e-5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gigpo_step_weight": -0.5}, "gigpo_step_weight"),
        ({"gigpo_anchor_threshold": 0.0}, "gigpo_anchor_threshold"),
        ({"gigpo_anchor_threshold": 1.5}, "gigpo_anchor_threshold"),
        ({"gigpo_norm_mode": "none"}, "gigpo_norm_mode"),
        ({"gigpo_anchor_similarity": "cosine"}, "gigpo_anchor_similarity"),
        ({"adv_estimator": "grpo", "gigpo_step_weight": 0.5}, "only adv_estimator=gigpo reads it"),
        ({"adv_estimator": "grpo", "gigpo_anchor_threshold": 0.9}, "only adv_estimator=gigpo reads it"),
        ({"gigpo_anchor_similarity": "difflib"}, "gigpo_anchor_threshold < 1"),
    ],
)
def test_gigpo_options_are_validated(fields, message):
    with pytest.raises(ConfigError, match=message):
        compose(None, None, [f"{k}={v}" for k, v in fields.items()])


def test_an_installed_plugin_is_found_by_roll_config(tmp_path):
    """The documented path: a package lists its module under the `roll_algos.estimators` entry points."""
    info = tmp_path / "my_estimators-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-estimators\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[roll_algos.estimators]\nmine = my_estimators\n")
    (tmp_path / "my_estimators.py").write_text(
        "from roll_algos import AdvantageOutput, register_estimator\n"
        "@register_estimator('plugged_raw', level='trajectory', group_based=False)\n"
        "def plugged_raw(inputs, config):\n"
        "    adv = inputs.episode_scores[:, None] * inputs.response_mask\n"
        "    return AdvantageOutput(adv, adv.clone())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "roll_pipeline.cli", "config", "adv_estimator=plugged_raw"],
        capture_output=True,
        text=True,
        env=env,
        timeout=840,  # `roll config` builds the builtin tiny model on a fresh cache: 66 s alone, 300+ under load
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "adv_estimator: plugged_raw" in done.stdout
