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


def plot_learning_curve(run_dir: Path, out: Path, baselines: dict[str, float] | None = None) -> Path:
    """Train success (per step) and validation success (greedy) against steps, plus baseline lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
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
    ax.legend(fontsize=8, loc="upper left")
    for key in ("actor/entropy", "actor/kl_loss"):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    ax2.set(xlabel="step", title="entropy / KL to the reference")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
