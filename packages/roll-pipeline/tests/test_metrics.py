"""Rollout and validation metrics: failed episodes count as failures and are reported on their own."""

from __future__ import annotations

import pytest
from roll_pipeline.observe.metrics import rollout_metrics, val_metrics
from roll_rollout import RolloutBatch, Trajectory, Turn


def traj(tag, success, error=None, reward=1.0):
    t = Trajectory(env_id=0, group_id=0, episode_id=0, tag=tag, seed=0, success=success, error=error)
    if error is None:
        t.turns.append(Turn([1, 2], [3], [-0.1], reward, True, True, "s"))
        t.metrics = {"success": float(success), "num_actions": 1.0}
    return t


def test_failed_episodes_lower_the_success_rate_and_are_counted_per_tag():
    healthy = [traj("A", True), traj("A", True), traj("A", False), traj("B", True)]
    failed = [traj("A", False, error="env_error: boom"), traj("B", False, error="env_timeout: slow")] * 2
    batch = RolloutBatch(healthy, failed, {"rollout/failed_episodes": 4.0})
    m = rollout_metrics(batch)
    assert m["env/A/success"] == pytest.approx(2 / (3 + 2))  # not 2/3: two A episodes failed
    assert m["env/B/success"] == pytest.approx(1 / (1 + 2))
    assert m["env/A/failed_episodes"] == 2 and m["env/B/failed_episodes"] == 2
    assert m["env/A/num_actions"] == 1.0  # other episode metrics are over healthy episodes
    assert m["rollout/failed_episodes"] == 4.0
    assert m["critic/score/mean"] == 1.0  # scores of healthy episodes only


def test_a_metric_failed_episodes_carry_counts_them_too():
    """An `openai_agent` episode says why it ended (`end/<kind>`), failed or not: the share is of every episode."""
    ends = [
        ("done", None),
        ("no_tool_call", None),
        ("agent_raised", "env_error: x"),
        ("agent_raised", "env_error: y"),
    ]
    episodes = []
    for kind, error in ends:
        t = traj("A", kind == "done", error=error)
        t.metrics |= {"end/done": float(kind == "done"), "end/agent_raised": float(kind == "agent_raised")}
        episodes.append(t)
    m = val_metrics(RolloutBatch(episodes[:2], episodes[2:]))
    assert m["val/env/A/end/agent_raised"] == 0.5 and m["val/env/A/end/done"] == 0.25
    assert m["val/env/A/num_actions"] == 1.0  # carried by the healthy episodes only


def test_a_tag_whose_every_episode_failed_reports_zero_success():
    m = val_metrics(RolloutBatch([], [traj("A", False, error="env_error: x")]))
    assert m["val/env/A/success"] == 0.0 and m["val/failed_episodes"] == 1.0


def test_flat_groups_are_the_groups_whose_episodes_all_scored_the_same():
    def member(group, reward):
        t = traj("A", reward > 0, reward=reward)
        t.group_id = group
        return t

    # group 0: 1, 1 (flat); group 1: 0, 1 (signal); group 2: 0, 0, 0 (flat); group 3: one episode (flat)
    trajs = [member(0, 1.0), member(0, 1.0), member(1, 0.0), member(1, 1.0)]
    trajs += [member(2, 0.0)] * 3 + [member(3, 0.5)]
    assert rollout_metrics(RolloutBatch(trajs, []))["critic/score/flat_groups"] == pytest.approx(3 / 4)
