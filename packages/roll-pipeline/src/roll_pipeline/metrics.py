"""Metric dictionaries in the upstream naming style (`env/FrozenLake/success`, `val/score/mean`, ...)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from roll_rollout import Trajectory


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def env_metrics(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Per-tag means of every episode metric: `{prefix}{tag}/{name}`."""
    by_tag: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if t.error is None:
            by_tag[t.tag].append(t)
    out: dict[str, float] = {}
    for tag, group in by_tag.items():
        names = {k for t in group for k in t.metrics}
        for name in sorted(names):
            out[f"{prefix}{tag}/{name}"] = _mean([t.metrics[name] for t in group if name in t.metrics])
    return out


def score_metrics(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """mean / max / min of the episode scores."""
    scores = [t.score for t in trajs if t.error is None]
    if not scores:
        return {}
    return {f"{prefix}/mean": _mean(scores), f"{prefix}/max": max(scores), f"{prefix}/min": min(scores)}


def rollout_metrics(trajs: Sequence[Trajectory], failed: int) -> dict[str, float]:
    """Metrics of a training rollout."""
    turns = [turn for t in trajs if t.error is None for turn in t.turns]
    out = {**env_metrics(trajs, "env/"), **score_metrics(trajs, "critic/score")}
    out["rollout/failed_trajectories"] = float(failed)
    out["rollout/num_turns"] = float(len(turns))
    out["tokens/response_length/mean"] = _mean([len(t.response_ids) for t in turns])
    out["tokens/prompt_length/mean"] = _mean([len(t.prompt_ids) for t in turns])
    out["tokens/response_truncated_ratio"] = _mean([t.finish_reason == "length" for t in turns])
    return out


def val_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Metrics of a validation rollout: `val/score/mean`, `val/env/{tag}/success`, ..."""
    out = {**env_metrics(trajs, "val/env/"), **score_metrics(trajs, "val/score")}
    out["val/failed_trajectories"] = float(sum(t.error is not None for t in trajs))
    return out
