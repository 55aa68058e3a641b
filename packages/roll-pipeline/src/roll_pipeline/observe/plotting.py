"""Learning-curve plots from a run's `metrics.jsonl` (`roll plot`), and the pieces a sweep's plot shares
(`experiments/sweep_plot.py`)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """Every logged row of `run_dir/metrics.jsonl`."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass the run directory of a `roll train` run")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def save_figure(fig: object, out: Path) -> Path:
    """Lay `fig` out, write it to `out` as a PNG (its folder made) and close it; `out` as a Path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()  # type: ignore[attr-defined]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return out


def add_legend(ax: object, loc: str = "best") -> None:
    """A legend when the panel drew a labelled line (an empty one only warns)."""
    if ax.get_legend_handles_labels()[0]:  # type: ignore[attr-defined]
        ax.legend(fontsize=8, loc=loc)  # type: ignore[attr-defined]


def draw_baselines(
    ax: object, baselines: dict[str, float] | None, colors: dict[str, str] | None = None
) -> None:
    """Dashed reference lines named at the right end; a line whose name starts with a tag of `colors`
    takes that tag's colour, the others are gray."""
    values = sorted((baselines or {}).values())
    for name, value in (baselines or {}).items():
        tag = next((t for t in colors or {} if name.startswith(f"{t} ")), None)
        ax.axhline(value, linestyle="--", color=colors[tag] if colors and tag else "gray", linewidth=1)  # type: ignore[attr-defined]
        # a name goes above its line, below it at the top or where a line just above would cover it
        crowded = any(value < other < value + 0.05 for other in values)
        y = value - 0.04 if value > 0.95 or crowded else value + 0.01
        transform = ax.get_yaxis_transform()  # type: ignore[attr-defined]
        ax.text(0.99, y, name, color="gray", fontsize=8, ha="right", transform=transform)  # type: ignore[attr-defined]


KL_COEF_KEYS = ("critic/kl_coef", "actor/kl_loss_coef")
"""The KL coefficients in use (scaled by the adaptive controller), drawn in a panel when they move."""

SIGNAL_PREFIX = "signal/"
"""The learning-signal shares (`trainer.signal`) and the KL to the RL phase's start (`trainer.drift`), drawn
in a panel with the validation flips when logged."""
SIGNAL_KEYS = ("actor/sampled_not_greedy",)
"""The other series of that panel: the share of sampled turns that greedy decoding would not have written."""
FLIP_KEYS = ("val/flips/fail_to_success", "val/flips/success_to_fail")


def _points(rows: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["step"], r[key]) for r in rows if key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def _draw_signal(ax: object, rows: list[dict[str, float]], keys: list[str]) -> None:
    """The shares of groups / turns without advantage and of turns sampled off the argmax, the KL to the RL
    phase's start in nats, dashed (left axis), and the validation flips (right axis)."""
    top = 1.0
    for key in keys:
        xs, ys = _points(rows, key)
        top = max(top, *ys) if ys else top
        ax.plot(xs, ys, "--" if "kl_to_start" in key else "-", label=key)  # type: ignore[attr-defined]
    title = "learning signal / validation flips"
    ax.set(xlabel="step", ylabel="share / KL (nats)", ylim=(0, top * 1.05), title=title)  # type: ignore[attr-defined]
    add_legend(ax, loc="upper left")
    flips = [k for k in FLIP_KEYS if any(k in r for r in rows)]
    if flips:
        right = ax.twinx()  # type: ignore[attr-defined]
        for key, marker in zip(flips, ("^", "v"), strict=False):
            right.plot(*_points(rows, key), marker, linestyle=":", label=key.split("/")[-1])
        right.set(ylabel="validation episodes")
        add_legend(right, loc="upper right")


def plot_learning_curve(
    run_dir: Path, out: Path, baselines: dict[str, float] | None = None, target_kl: float | None = None
) -> Path:
    """Train success (per step) and validation success (greedy) of each tag against steps, one colour per tag,
    plus baseline lines (in the colour of the tag their name starts with, else gray); the
    entropy and the measured KL to the reference (with `target_kl` as a line); the KL coefficients when
    the adaptive controller moved them; the shares of groups without advantage and the validation episodes
    won and lost since the last pass, when logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    coefs = {k: [(r["step"], r[k]) for r in rows if k in r] for k in KL_COEF_KEYS}
    coefs = {k: pts for k, pts in coefs.items() if len({v for _, v in pts}) > 1}
    signal = sorted({k for r in rows for k in r if k.startswith(SIGNAL_PREFIX) or k in SIGNAL_KEYS})
    panels = 2 + bool(coefs) + bool(signal)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4))
    ax, ax2 = axes[0], axes[1]
    keys = sorted(
        {k for r in rows for k in r if k.startswith(("env/", "val/env/")) and k.endswith("/success")}
    )
    tags = sorted({k.split("/")[-2] for k in keys})
    # a tag's train, val and baseline lines share its colour
    color = {tag: f"C{i % 10}" for i, tag in enumerate(tags)}
    for key in keys:
        val = key.startswith("val/")
        ax.plot(
            *_points(rows, key),
            "o-" if val else "-",
            label=key,
            alpha=0.9 if val else 0.5,
            color=color[key.split("/")[-2]],
        )
    draw_baselines(ax, baselines, color)
    ax.set(xlabel="step", ylabel="success rate", ylim=(0, 1), title=f"{' / '.join(tags)} success".lstrip())
    add_legend(ax, loc="upper left")
    for key in ("actor/entropy", "actor/kl_loss", "critic/kl"):
        if any(key in r for r in rows):
            ax2.plot(*_points(rows, key), label=key)
    if target_kl is not None:
        ax2.axhline(target_kl, linestyle="--", color="gray", linewidth=1, label=f"target_kl {target_kl}")
    ax2.set(xlabel="step", title="entropy / KL to the reference")
    add_legend(ax2)
    for key, pts in coefs.items():
        axes[2].plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    if coefs:
        axes[2].set(xlabel="step", title="KL coefficients (adaptive controller)")
        add_legend(axes[2])
    if signal:
        _draw_signal(axes[-1], rows, signal)
    return save_figure(fig, out)
