"""The per-seed curves of `roll sweep`: every seed's validation success against steps and against the
training clock, with the threshold levels and the baselines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from roll_pipeline.experiments.sweep import THRESHOLDS, SeedResult, run_labels
from roll_pipeline.observe.plotting import add_legend, draw_baselines, save_figure


def plot_sweep(
    results: Sequence[SeedResult],
    out: Path,
    baselines: dict[str, float] | None = None,
    title: str = "greedy validation success per seed",
) -> Path:
    """Every seed's validation curve against steps and against training-clock minutes (`roll sweep`),
    with the threshold levels dotted and the baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_minute) = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for i, (result, name) in enumerate(zip(results, run_labels(results), strict=True)):
        if not result.curve:
            continue
        final = result.final.success if result.final else 0.0
        label = f"seed {name}: final {final:.2f}"
        label += f" ({result.status})" if result.status not in ("done", "reused") else ""
        color = f"C{i % 10}"
        steps = [p.step for p in result.curve]
        minutes = [p.minutes for p in result.curve]
        success = [p.success for p in result.curve]
        by_step.plot(steps, success, "o-", color=color, label=label, markersize=3)
        by_minute.plot(minutes, success, "o-", color=color, markersize=3)
    for ax in (by_step, by_minute):
        for level in THRESHOLDS:
            ax.axhline(level, linestyle=":", color="black", linewidth=0.8, alpha=0.5)
        draw_baselines(ax, baselines)
    by_step.set(xlabel="step", ylabel="success rate", ylim=(0, 1), title=title)
    by_minute.set(
        xlabel="training minutes (summed step + validation time)", title="against the training clock"
    )
    add_legend(by_step, loc="upper left")
    return save_figure(fig, out)
