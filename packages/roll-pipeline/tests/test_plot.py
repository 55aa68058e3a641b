"""`roll plot`: a PNG from a run directory, with the FrozenLake baselines drawn at the run's turn cap."""

from __future__ import annotations

import json

from roll_pipeline.cli import commands as cli
from roll_pipeline.cli.args import EXAMPLES_DIR
from roll_pipeline.config.compose import tiny_config


def test_plot_writes_png_with_baselines(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(tiny_config().model_dump(mode="json")))
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


def test_a_multi_tag_run_gets_one_curve_per_tag_and_each_tags_baselines(tmp_path, monkeypatch):
    from matplotlib.axes import Axes
    from roll_pipeline.config.compose import compose

    cfg = compose(str(EXAMPLES_DIR / "tiny-cpu-agentic"), "agent_val_multi_tag", [])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg.model_dump(mode="json")))
    rows = [
        {"step": s, "env/FrozenLake/success": 0.1 * s, "env/Sokoban/success": 0.3, "actor/entropy": 0.5}
        for s in range(1, 4)
    ]
    rows += [{"step": s, "val/env/FrozenLake/success": 0.2, "val/env/Sokoban/success": 0.4} for s in (0, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves, lines = {}, {}
    real_plot, real_axhline = Axes.plot, Axes.axhline

    def plot(self, *args, **kwargs):
        curves[kwargs.get("label")] = (list(args[1]), kwargs.get("color"))
        return real_plot(self, *args, **kwargs)

    def axhline(self, y=0, *args, **kwargs):
        lines[y] = kwargs.get("color")
        return real_axhline(self, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", plot)
    monkeypatch.setattr(Axes, "axhline", axhline)
    assert cli.main(["plot", str(run)]) == 0
    assert curves["val/env/FrozenLake/success"][0] == [0.2, 0.2]
    assert curves["val/env/Sokoban/success"][0] == [0.4, 0.4]
    # a tag's train curve, validation curve and baselines share a colour; the two tags differ
    fl, sk = curves["val/env/FrozenLake/success"][1], curves["val/env/Sokoban/success"][1]
    assert fl != sk and curves["env/FrozenLake/success"][1] == fl and curves["env/Sokoban/success"][1] == sk
    assert set(cli._run_baselines(run)) == {
        "FrozenLake random baseline",
        "FrozenLake best_fixed_sequence baseline",
        "Sokoban random baseline",
        "Sokoban best_fixed_10_moves baseline",
        "Sokoban push_rule baseline",
        "Sokoban optimal baseline",
    }
    assert lines[1.0] == sk  # Sokoban's optimal line


def test_the_learning_signal_and_the_validation_flips_get_a_panel(tmp_path, monkeypatch):
    from roll_pipeline.observe import plotting

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "step": s,
            "signal/zero_adv_groups": 0.2 * s,
            "signal/zero_adv_step_groups": 0.1,
            "actor/sampled_not_greedy": 0.3,
        }
        for s in (1, 2)
    ]
    rows += [
        {
            "step": 2,
            "val/flips/fail_to_success": 3.0,
            "val/flips/success_to_fail": 1.0,
            "signal/kl_to_start/k3": 1.5,
        }
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures = []
    monkeypatch.setattr(plotting, "save_figure", lambda fig, out: figures.append(fig) or out)
    plotting.plot_learning_curve(run, run / "curve.png")
    (fig,) = figures
    panel = next(a for a in fig.axes if a.get_title().startswith("learning signal"))
    labels = [line.get_label() for line in panel.get_lines()]
    assert labels == sorted([*(k for k in rows[0] if k != "step"), "signal/kl_to_start/k3"])
    kl = panel.get_lines()[labels.index("signal/kl_to_start/k3")]
    assert kl.get_linestyle() == "--" and panel.get_ylim()[1] >= 1.5  # nats, not a share: the axis grows
    right = next(a for a in fig.axes if a is not panel and a.get_shared_x_axes().joined(a, panel))
    assert [line.get_ydata().tolist() for line in right.get_lines()] == [[3.0], [1.0]]
