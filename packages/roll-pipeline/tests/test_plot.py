"""`roll plot`: a PNG from a run directory, with the FrozenLake baselines drawn at the run's turn cap."""

from __future__ import annotations

import json

from roll_pipeline import cli
from roll_pipeline.config import AgenticConfig


def test_plot_writes_png_with_baselines(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(AgenticConfig().model_dump(mode="json")))
    rows = [{"step": s, "env/FrozenLake/success": 0.1 * s, "actor/entropy": 0.5} for s in range(1, 4)]
    rows.append({"step": 3, "val/env/FrozenLake/success": 0.2})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = {}
    real = cli._run_baselines

    def spy(run_dir):
        drawn.update(real(run_dir) or {})
        return drawn

    monkeypatch.setattr(cli, "_run_baselines", spy)
    assert cli.main(["plot", str(run)]) == 0
    png = run / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(drawn) == {"random baseline", "best_fixed_sequence baseline"}
    assert 0.1 < drawn["random baseline"] < drawn["best_fixed_sequence baseline"] < 0.5


def test_plot_of_a_run_with_an_unreadable_config_still_draws(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"no_such_key": 1}')
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "env/FrozenLake/success": 0.2}) + "\n")
    assert cli.main(["plot", str(run)]) == 0
    assert (run / "learning_curve.png").exists()
    assert "no baselines drawn" in capsys.readouterr().out


def test_adaptive_kl_runs_get_the_target_line_and_a_coefficient_panel(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"target_kl": 0.05}))
    rows = [{"step": s, "critic/kl": 0.01 * s, "actor/kl_loss_coef": 0.05 * 1.02**s} for s in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli._run_target_kl(run) == 0.05
    assert cli.main(["plot", str(run)]) == 0
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
