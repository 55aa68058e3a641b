"""Training samples: step rows and StarPO trajectory rows from the exact sampled ids, and the turn view.

The trajectory rows are checked on real FrozenLake conversations assembled by the rollout's
`PromptBuilder` with the tiny model's tokenizer; the turn view is checked by computing advantages the
independent way (roll_algos directly on the training rows) for the estimators whose row model allows it.
"""

from __future__ import annotations

import random

import pytest
import roll_envs
import torch
from roll_algos import AdvantageConfig, AdvantageInputs, compute_advantages
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.models.recipes import TINY_FROZEN_LAKE_INSTRUCTION
from roll_pipeline.trainer.samples import SampleError, build_samples
from roll_rollout import PromptBuilder, Trajectory, Turn
from roll_rollout.hosting.agent_turns import UNCHAINED_METRIC


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_pretrain("builtin:tiny-frozen-lake"))


def play(tokenizer, seed: int, group: int, history: int | None, turns: int = 4) -> Trajectory:
    """A FrozenLake episode with random answers, turns built as the env manager builds them."""
    rng = random.Random(seed)
    builder = PromptBuilder(tokenizer, TINY_FROZEN_LAKE_INSTRUCTION, max_history_turns=history)
    env = roll_envs.make("frozen_lake")
    obs, _ = env.reset(seed=group)
    traj = Trajectory(env_id=seed, group_id=group, episode_id=seed, tag="FrozenLake", seed=group)
    observations, responses = [obs], []
    for _ in range(turns):
        prompt = builder.prompt(observations, responses)
        move = rng.choice(["Left", "Right", "Up", "Down"])
        ids = tokenizer.encode(f"<answer>{move}</answer>", add_special_tokens=False)
        obs, reward, terminated, truncated, info = env.step(tokenizer.decode(ids))
        traj.turns.append(
            Turn(
                prompt,
                ids,
                [-0.1 * (i + 1) for i in range(len(ids))],
                float(reward),
                True,
                True,
                observations[-1],
            )
        )
        observations.append(obs)
        responses.append(ids)
        if terminated or truncated:
            break
    traj.success = bool(info.get("success", False))
    return traj


def batch(tokenizer, history: int | None) -> list[Trajectory]:
    return [play(tokenizer, seed, group=seed // 3, history=history) for seed in range(9)]


def test_trajectory_rows_are_the_conversation_as_sampled(tokenizer):
    trajs = batch(tokenizer, history=None)
    s = build_samples(trajs, pad_id=0, shape="trajectory")
    assert s.num_rows == len(trajs)
    for r, traj in enumerate(trajs):
        last = traj.turns[-1]
        row = s.input_ids[r, : int(s.lengths[r])].tolist()
        assert row == last.prompt_ids + last.response_ids  # the exact ids, nothing re-tokenised
        assert s.input_ids[r][s.response_mask[r]].tolist() == [i for t in traj.turns for i in t.response_ids]
        for k, turn in enumerate(traj.turns):  # each turn's response sits where its own prompt ends
            start = len(turn.prompt_ids)
            assert row[start : start + len(turn.response_ids)] == turn.response_ids
            assert s.segment_ids[r, start : start + len(turn.response_ids)].tolist() == [k + 1] * len(
                turn.response_ids
            )
        observations = ~s.response_mask[r] & s.attention_mask[r].bool()
        assert int(observations.sum()) == len(row) - traj.num_response_tokens  # observations masked
        assert s.infer_log_probs[r][s.response_mask[r]].tolist() == pytest.approx(
            [lp for t in traj.turns for lp in t.log_probs]
        )


def test_step_rows_and_the_view_round_trip(tokenizer):
    trajs = batch(tokenizer, history=0)
    s = build_samples(trajs, pad_id=0, shape="step")
    assert s.num_rows == sum(len(t.turns) for t in trajs)
    x = torch.randn(s.input_ids.shape) * s.response_mask
    assert torch.equal(s.to_train(s.to_turns(x)), x)
    y = torch.randn(s.turns.response_mask.shape) * s.turns.response_mask
    assert torch.equal(s.to_turns(s.to_train(y)), y)


def test_prompts_that_drop_history_cannot_be_trajectory_rows(tokenizer):
    with pytest.raises(SampleError, match="max_history_turns: null"):
        build_samples(batch(tokenizer, history=0), pad_id=0, shape="trajectory")


def test_an_agents_unchained_episode_trains_its_calls_as_step_rows_among_trajectory_rows(tokenizer):
    """An agent episode whose calls do not chain (`agent_unchained` 1) is one row per call in a trajectory
    batch; the chained episodes stay one row each, and the turn view is the step batch's turn for turn."""
    chained, cut = batch(tokenizer, history=None)[:3], batch(tokenizer, history=0)[3:6]
    for t in cut:
        t.metrics[UNCHAINED_METRIC] = 1.0
    trajs = [chained[0], cut[0], chained[1], cut[1], chained[2], cut[2]]
    s, step = build_samples(trajs, 0, "trajectory"), build_samples(trajs, 0, "step")
    assert s.num_rows == 3 + sum(len(t.turns) for t in cut)
    rows = [s.input_ids[r, : int(s.lengths[r])].tolist() for r in range(s.num_rows)]
    expected = []
    for t in trajs:
        ends = [t.turns[-1]] if t in chained else t.turns
        expected += [turn.prompt_ids + turn.response_ids for turn in ends]
    assert rows == expected
    for name in ("response_mask", "token_rewards", "trajectory_ids", "step_ids", "anchor_ids"):
        assert torch.equal(getattr(s.turns, name), getattr(step.turns, name)), name
    x = torch.randn(s.turns.response_mask.shape) * s.turns.response_mask
    assert torch.equal(s.to_train(x)[s.response_mask], step.to_train(x)[step.response_mask])


def direct_inputs(s, values=None) -> AdvantageInputs:
    """Estimator inputs built on the training rows themselves (the row model with one row per trajectory)."""
    t = s.turns
    first = {int(ti): n for n, ti in reversed(list(enumerate(t.trajectory_ids)))}
    traj = s.row_trajectory
    rewards = s.to_train(t.token_rewards)
    return AdvantageInputs(
        response_mask=s.response_mask,
        token_rewards=rewards,
        episode_scores=t.episode_scores[[first[int(i)] for i in traj]],
        step_rewards=torch.zeros(s.num_rows),
        trajectory_ids=traj,
        group_ids=t.group_ids[[first[int(i)] for i in traj]],
        step_ids=torch.zeros(s.num_rows, dtype=torch.long),
        anchor_ids=torch.full((s.num_rows,), -1),
        values=values,
    )


@pytest.mark.parametrize("estimator", ["grpo", "reinforce", "gae", "reinforce_plus_plus"])
def test_advantages_on_the_turn_view_equal_advantages_on_trajectory_rows(tokenizer, estimator):
    s = build_samples(batch(tokenizer, history=None), pad_id=0, shape="trajectory")
    values = torch.rand(s.input_ids.shape) * s.response_mask
    config = AdvantageConfig(gamma=0.9, lambd=0.8, whiten=True)
    got = compute_advantages(estimator, s.advantage_inputs(values=values), config)
    want = compute_advantages(estimator, direct_inputs(s, values), config)
    torch.testing.assert_close(s.to_train(got.advantages), want.advantages, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator", ["gigpo", "step_reinforce", "grpo", "gae"])
def test_every_estimator_gives_each_turn_the_same_advantage_in_both_shapes(tokenizer, estimator):
    """Same episodes with whole-history prompts, trained as step rows or as trajectory rows."""
    trajs = batch(tokenizer, history=None)
    step, traj = build_samples(trajs, 0, "step"), build_samples(trajs, 0, "trajectory")
    config = AdvantageConfig(gamma=0.9, whiten=True)
    values = torch.rand(step.turns.response_mask.shape)
    a = compute_advantages(estimator, step.advantage_inputs(values=step.to_train(values)), config)
    b = compute_advantages(estimator, traj.advantage_inputs(values=traj.to_train(values)), config)
    torch.testing.assert_close(a.advantages, b.advantages)
    assert float(a.advantages.abs().sum()) > 0
