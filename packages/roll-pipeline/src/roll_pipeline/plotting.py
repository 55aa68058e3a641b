"""Learning-curve plots from a run's `metrics.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """Every logged row of `run_dir/metrics.jsonl`."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass the run directory of a `roll train` run")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _legend(ax: object, loc: str = "best") -> None:
    """A legend when the panel drew a labelled line (an empty one only warns)."""
    if ax.get_legend_handles_labels()[0]:  # type: ignore[attr-defined]
        ax.legend(fontsize=8, loc=loc)  # type: ignore[attr-defined]


KL_COEF_KEYS = ("critic/kl_coef", "actor/kl_loss_coef")
"""The KL coefficients in use (scaled by the adaptive controller), drawn in a third panel when they move."""


def plot_learning_curve(
    run_dir: Path, out: Path, baselines: dict[str, float] | None = None, target_kl: float | None = None
) -> Path:
    """Train success (per step) and validation success (greedy) against steps, plus baseline lines; the
    entropy and the measured KL to the reference (with `target_kl` as a line); the KL coefficients when
    the adaptive controller moved them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    coefs = {k: [(r["step"], r[k]) for r in rows if k in r] for k in KL_COEF_KEYS}
    coefs = {k: pts for k, pts in coefs.items() if len({v for _, v in pts}) > 1}
    fig, axes = plt.subplots(1, 3 if coefs else 2, figsize=(16 if coefs else 11, 4))
    ax, ax2 = axes[0], axes[1]
    for key in sorted(
        {k for r in rows for k in r if k.startswith(("env/", "val/env/")) and k.endswith("/success")}
    ):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        style = "o-" if key.startswith("val/") else "-"
        ax.plot(
            [p[0] for p in pts], [p[1] for p in pts], style, label=key, alpha=0.9 if "val" in key else 0.6
        )
    for name, value in (baselines or {}).items():
        ax.axhline(value, linestyle="--", color="gray", linewidth=1)
        ax.text(0, value + 0.01, name, color="gray", fontsize=8)
    ax.set(xlabel="step", ylabel="success rate", ylim=(0, 1), title="FrozenLake success")
    _legend(ax, loc="upper left")
    for key in ("actor/entropy", "actor/kl_loss", "critic/kl"):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    if target_kl is not None:
        ax2.axhline(target_kl, linestyle="--", color="gray", linewidth=1, label=f"target_kl {target_kl}")
    ax2.set(xlabel="step", title="entropy / KL to the reference")
    _legend(ax2)
    for key, pts in coefs.items():
        axes[2].plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    if coefs:
        axes[2].set(xlabel="step", title="KL coefficients (adaptive controller)")
        _legend(axes[2])
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
