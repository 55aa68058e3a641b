"""Metric dictionaries in the upstream naming style (`env/FrozenLake/success`, `val/score/mean`, ...).

Failed episodes are never trained on, but they are never hidden either: every success rate counts
them as failures (`success = successes / (healthy + failed episodes)`), and they are reported on
their own (`rollout/failed_episodes`, `val/failed_episodes`, `env/{tag}/failed_episodes`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import overload

from roll_rollout import RolloutBatch, Trajectory


@overload
def mean(values: Sequence[float]) -> float: ...
@overload
def mean(values: Sequence[float], empty: None) -> float | None: ...
def mean(values: Sequence[float], empty: float | None = 0.0) -> float | None:
    """The mean of `values` as a float (summed in order, then divided by their count); `empty` when there are
    none. The one mean of the metrics, the trainer's merges, the progress bar and the sweep tables."""
    return float(sum(values) / len(values)) if values else empty


def episodes_by_tag(
    trajs: Sequence[Trajectory], failed: Sequence[Trajectory]
) -> dict[str, tuple[list[Trajectory], int]]:
    """Each tag's healthy episodes and how many of its episodes failed, tags in sorted order."""
    healthy: dict[str, list[Trajectory]] = defaultdict(list)
    broken: dict[str, int] = defaultdict(int)
    for t in trajs:
        healthy[t.tag].append(t)
    for t in failed:
        broken[t.tag] += 1
    return {tag: (healthy[tag], broken[tag]) for tag in sorted(set(healthy) | set(broken))}


def env_metrics(trajs: Sequence[Trajectory], failed: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Per-tag means of every episode metric over the episodes that carry it: `{prefix}{tag}/{name}` (a
    failed episode carries only why it failed, an `openai_agent` episode's `end/<kind>`, or nothing);
    `success` over healthy and failed episodes; `failed_episodes` per tag."""
    out: dict[str, float] = {}
    failed_of: dict[str, list[Trajectory]] = defaultdict(list)
    for t in failed:
        failed_of[t.tag].append(t)
    for tag, (group, broken) in episodes_by_tag(trajs, failed).items():
        every = group + failed_of[tag]
        for name in sorted({k for t in every for k in t.metrics}):
            out[f"{prefix}{tag}/{name}"] = mean([t.metrics[name] for t in every if name in t.metrics])
        out[f"{prefix}{tag}/success"] = sum(t.success for t in group) / (len(group) + broken)
        out[f"{prefix}{tag}/failed_episodes"] = float(broken)
    return out


def score_metrics(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """mean / max / min of the episode scores."""
    scores = [t.score for t in trajs]
    if not scores:
        return {}
    return {f"{prefix}/mean": mean(scores), f"{prefix}/max": max(scores), f"{prefix}/min": min(scores)}


def flat_group_fraction(trajs: Sequence[Trajectory]) -> float:
    """The fraction of groups whose episodes all scored the same: a group-relative advantage (GRPO, GiGPO's
    episode part) is 0 for each of them, so they teach the policy nothing at the episode level."""
    scores: dict[int, list[float]] = {}
    for t in trajs:
        scores.setdefault(t.group_id, []).append(t.score)
    if not scores:
        return 0.0
    return sum(max(s) - min(s) <= 1e-9 for s in scores.values()) / len(scores)


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Metrics of a training rollout: env metrics, scores, token lengths, and the scheduler's counts."""
    trajs = batch.trajectories
    turns = [turn for t in trajs for turn in t.turns]
    out = {
        **env_metrics(trajs, batch.failed, "env/"),
        **score_metrics(trajs, "critic/score"),
        **batch.metrics,
    }
    out["critic/score/flat_groups"] = flat_group_fraction(trajs)
    out["rollout/num_turns"] = float(len(turns))
    # a group's copies share their episode: how many different episodes the step trains on
    out["rollout/distinct_episodes"] = float(len({(t.tag, t.seed) for t in trajs}))
    out["tokens/response_length/mean"] = mean([len(t.response_ids) for t in turns])
    out["tokens/prompt_length/mean"] = mean([len(t.prompt_ids) for t in turns])
    out["tokens/response_truncated_ratio"] = mean([t.finish_reason == "length" for t in turns])
    return out


def val_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Metrics of a validation rollout: `val/score/mean`, `val/env/{tag}/success`, `val/failed_episodes`,
    `val/episodes` (all it played: a curve says what each of its points was measured on)."""
    out = {
        **env_metrics(batch.trajectories, batch.failed, "val/env/"),
        **score_metrics(batch.trajectories, "val/score"),
    }
    out["val/failed_episodes"] = float(len(batch.failed))
    out["val/episodes"] = float(len(batch.trajectories) + len(batch.failed))
    return out
