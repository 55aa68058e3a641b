"""Aggregation of per-step env metrics over an episode (each metric declares mean/sum/last/max/min)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

AGGREGATIONS = ("mean", "sum", "last", "max", "min")
"""The ways a metric can aggregate over the steps of an episode."""


def aggregate_metrics(
    steps: Sequence[Mapping[str, float]], aggregation: Mapping[str, str], default: str = "mean"
) -> dict[str, float]:
    """Fold per-step metric dicts into episode metrics; a metric absent from `aggregation` uses `default`.

    >>> aggregate_metrics([{"ok": 1.0, "n": 1.0}, {"ok": 0.0, "n": 2.0}], {"n": "sum"})
    {'ok': 0.5, 'n': 3.0}
    """
    values: dict[str, list[float]] = {}
    for step in steps:
        for key, value in step.items():
            values.setdefault(key, []).append(float(value))
    result: dict[str, float] = {}
    for key, series in values.items():
        how = aggregation.get(key, default)
        if how == "mean":
            result[key] = sum(series) / len(series)
        elif how == "sum":
            result[key] = sum(series)
        elif how == "last":
            result[key] = series[-1]
        elif how == "max":
            result[key] = max(series)
        elif how == "min":
            result[key] = min(series)
        else:
            raise ValueError(f"metric {key!r}: unknown aggregation {how!r}; expected one of {AGGREGATIONS}.")
    return result
