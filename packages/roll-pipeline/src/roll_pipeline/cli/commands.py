"""The `roll` command: train, sweep, eval, rollout, show, serve, config, migrate, baselines, plot."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from roll_pipeline.cli.args import EXAMPLES_DIR, compose_checked
from roll_pipeline.cli.migrate import migrate_command
from roll_pipeline.cli.play import evaluate_command, rollout_command, serve, show
from roll_pipeline.config.compose import parse_args


def _train_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true", help="print every metric each step")


def train(argv: list[str]) -> int:
    """Compose and check the config (before any worker starts), run the pipeline, print the report."""
    args = parse_args(argv, extra=_train_options)
    config = compose_checked(args, "roll train")
    if config is None:
        return 2
    from roll_pipeline.observe.report import print_final_report, print_run_header

    print_run_header(config)
    from roll_pipeline.pipeline import AgenticPipeline
    from roll_pipeline.runtime.cluster import ClusterError

    try:  # the cluster checks before any worker starts: Ray installed, shared storage, CPUs that fit
        pipeline = AgenticPipeline(config, progress=not args.no_progress, verbose=args.verbose)
    except ClusterError as exc:
        print(f"roll train: {exc}", file=sys.stderr)
        return 2
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    print_final_report(config, summary)
    return 0


def _sweep_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", default=None, help="e.g. 1,2,3 or 1-3: one run per seed")
    parser.add_argument(
        "--parallel", type=int, default=1, help="runs at once, as local processes (default 1)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="sweep folder (default: OUTPUT_DIR/EXP_NAME_sweep)"
    )
    parser.add_argument(
        "--force", action="store_true", help="rerun seeds whose run folder has a run (moved aside)"
    )
    parser.add_argument(
        "--report",
        nargs="+",
        type=Path,
        default=None,
        metavar="DIR",
        help="no training: the table and plot of run folders, sweep folders or folders of runs",
    )


def sweep(argv: list[str]) -> int:
    """Run a config over several seeds (one `roll train` process each; finished runs are reused), then
    print the table of greedy validation success per seed and draw every seed's curve."""
    args = parse_args(argv, "roll sweep", sweep.__doc__ or "", _sweep_options)
    from roll_pipeline.experiments.sweep_runner import SweepError

    try:
        if args.report is not None:
            return _sweep_report(args)
        return _sweep_train(args, argv)
    except (SweepError, FileNotFoundError) as exc:
        print(f"roll sweep: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\n[sweep] interrupted: run the same command again to resume (finished seeds are reused)")
        return 130


def _sweep_train(args: argparse.Namespace, argv: list[str]) -> int:
    from roll_pipeline.experiments.sweep_runner import SweepError, parse_seeds, plan_sweep, run_sweep

    if args.seeds is None:
        raise SweepError("give the seeds, e.g. --seeds 1,2,3 (or --report DIR to tabulate existing runs)")
    seeds = parse_seeds(args.seeds)
    if args.parallel < 1:
        raise SweepError(f"--parallel {args.parallel}: give 1 or more runs at once")
    config = compose_checked(args, "roll sweep")
    if config is None:
        return 2
    jobs = plan_sweep(
        config,
        seeds,
        config_path=args.config_path,
        config_name=args.config_name,
        overrides=args.overrides,
        force=args.force,
        progress=not args.no_progress and args.parallel == 1,
    )
    print(
        f"[sweep] {config.exp_name}: seeds {seeds}, {config.max_steps} steps each, {args.parallel} at a time"
    )
    results = run_sweep(jobs, args.parallel, config.max_steps)
    out = args.out or Path(config.output_dir) / f"{config.exp_name}_sweep"
    meta = {"exp_name": config.exp_name, "seeds": seeds, "command": ["roll", "sweep", *argv]}
    return _sweep_finish(results, out, meta)


def _sweep_report(args: argparse.Namespace) -> int:
    from roll_pipeline.experiments.sweep import read_seed, report_run_dirs

    run_dirs = report_run_dirs(args.report)
    results = sorted((read_seed(d) for d in run_dirs), key=lambda r: (r.seed is None, r.seed or 0))
    names = {d.name.rsplit("_seed", 1)[0] for d in run_dirs}
    base = names.pop() if len(names) == 1 else None
    out = args.out or run_dirs[0].parent / (f"{base}_sweep" if base else "sweep")
    return _sweep_finish(results, out, {"exp_name": base, "seeds": [r.seed for r in results]})


def _sweep_finish(results: list[Any], out: Path, meta: dict[str, Any]) -> int:
    """Print the table, write sweep.json / sweep.md / sweep.png; 1 when a seed failed, else 0."""
    from roll_pipeline.experiments.sweep import CLOCK, format_table, write_report
    from roll_pipeline.experiments.sweep_plot import plot_sweep

    json_path, md_path = write_report(results, out, meta)
    with_config = [r.run_dir for r in results if (r.run_dir / "config.json").exists()]
    # the sweep plots validation success: only the validation tags' baselines apply
    baselines = _run_baselines(with_config[0], validation_only=True) if with_config else None
    png = plot_sweep(results, out / "sweep.png", baselines)
    print(f"\n[sweep] greedy validation success; min→x on the {CLOCK}")
    print(format_table(results))
    print(f"[sweep] wrote {json_path}, {md_path}, {png}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        print(f"[sweep] {len(failed)} seed(s) failed: {[r.seed for r in failed]}; see their train.log")
    return 1 if failed else 0


def show_config(argv: list[str]) -> int:
    """Print the composed config as YAML, after the checks `roll train` makes before it starts."""
    import yaml

    args = parse_args(argv, prog="roll config")
    config = compose_checked(args, "roll config")
    if config is None:
        return 2
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return 0


def _baselines_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default=None, help="a registered env id, instead of a run's config")
    parser.add_argument("--episodes", type=int, default=1000, help="with --env: episodes to score")
    parser.add_argument(
        "--max-steps", type=int, default=None, help="with --env: moves per episode (default: the env's)"
    )


def baselines(argv: list[str]) -> int:
    """Print reference baselines, those each env class provides (for example FrozenLake's random policy and
    best fixed move sequence on the scored maps, with describe the rule that follows the line in words;
    Sokoban's random and optimal (BFS) policies, four_choice's best fixed answer):
    of a run's config (--config-path/--config-name and overrides), for each validation tag on exactly its
    validation seeds; or of an env with its default config (--env ID) on --episodes episodes from seed
    1000000. With the number of distinct first observations when the episodes repeat the same few, and for
    a config how many validation episodes open as one of the run's first 2,000 training seeds does."""
    args = parse_args(argv, "roll baselines", baselines.__doc__ or "", _baselines_options)
    from roll_envs import RollEnvsError

    from roll_pipeline.observe.report import env_id_baselines, envs_with_baselines

    if args.env is None and args.config_path is None and args.config_name is None and not args.overrides:
        print(
            "roll baselines: name the env with --env ID, or a run's config with --config-path/--config-name;"
            " envs with baselines: " + ", ".join(envs_with_baselines()),
            file=sys.stderr,
        )
        return 2
    if args.env is None:
        return _config_baselines(args)
    try:
        found = env_id_baselines(args.env, args.episodes, args.max_steps)
    except (ValueError, RollEnvsError) as exc:
        print(f"roll baselines: {exc}", file=sys.stderr)
        return 2
    _print_baselines(found)
    return 0


def _print_baselines(found: Any, observations: bool = True) -> None:
    """One line per success rate and per detail (`observations`: and the distinct first observations when
    they are few)."""
    from roll_pipeline.observe.report import few_observations

    for name, value in found.success.items():
        print(f"{name:>28}: {value:.3f}")
    for name, value in found.details.items():
        print(f"{name:>28}: {value:g}")
    if observations and few_observations(found):
        print(f"{'distinct_observations':>28}: {found.observations} (in {len(found.seeds)} episodes)")


def _config_baselines(args: argparse.Namespace) -> int:
    """`roll baselines` of a run's config: each validation tag's, on its validation seeds."""
    from roll_pipeline.config.compose import ConfigError
    from roll_pipeline.observe.report import scored_on, tag_baselines
    from roll_pipeline.preflight import compose

    try:
        config = compose(args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR)
    except ConfigError as exc:
        print(f"roll baselines: {exc}", file=sys.stderr)
        return 2
    found = tag_baselines(config, validation_only=True)
    if not found:
        print(f"roll baselines: no validation tag of {config.exp_name!r} has an env with baselines")
    for tag, base in found.items():
        name = base.env if tag == base.env else f"{tag} ({base.env})"
        turns = f"{base.turns} turn{'s' * (base.turns != 1)}"
        print(f"{name} at {turns}, on {scored_on(base, validated=True)}:")
        _print_baselines(base, observations=False)
        print(base.note)
    return 0


def plot(argv: list[str]) -> int:
    """Plot a run's learning curve (metrics.jsonl) to a PNG."""
    parser = argparse.ArgumentParser(prog="roll plot")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--out", type=Path, default=None, help="PNG path (default: RUN_DIR/learning_curve.png)"
    )
    args = parser.parse_args(argv)
    from roll_pipeline.observe.plotting import plot_learning_curve

    out = plot_learning_curve(
        args.run_dir,
        args.out or args.run_dir / "learning_curve.png",
        _run_baselines(args.run_dir),
        _run_target_kl(args.run_dir),
    )
    print(f"wrote {out}")
    return 0


def _run_baselines(run_dir: Path, validation_only: bool = False) -> dict[str, float] | None:
    """The baselines of the run's tags (`validation_only`: of its validation tags) at their turn caps, drawn
    as reference lines; None when no such tag's env has any."""
    import json

    from roll_pipeline.config.schema import AgenticConfig
    from roll_pipeline.observe.report import baseline_lines

    path = run_dir / "config.json"
    if not path.exists():
        return None
    try:
        config = AgenticConfig.model_validate(json.loads(path.read_text(encoding="utf-8")))
    # JSON and pydantic validation errors are both ValueErrors; an older or edited run still plots.
    except ValueError as exc:
        print(
            f"[roll] {path} is not a config this version reads ({exc.__class__.__name__}); no baselines drawn"
        )
        return None
    return baseline_lines(config, validation_only=validation_only) or None


def _run_target_kl(run_dir: Path) -> float | None:
    """The run's `target_kl` (adaptive KL control), drawn as a line on the KL panel; None when unset."""
    import json

    try:
        value = json.loads((run_dir / "config.json").read_text(encoding="utf-8")).get("target_kl")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, int | float) else None


COMMANDS = {
    "train": train,
    "sweep": sweep,
    "eval": evaluate_command,
    "serve": serve,
    "rollout": rollout_command,
    "show": show,
    "config": show_config,
    "migrate": migrate_command,
    "baselines": baselines,
    "plot": plot,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `roll` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: roll {train,sweep,eval,rollout,show,serve,config,migrate,baselines,plot} [...]\n")
        print("  train      train an agent (no config file: the tiny model learning FrozenLake on the CPU)")
        print("  sweep      train over several seeds; table and plot of every seed's validation curve")
        print("  eval       validation episodes of a model, checkpoint or OpenAI-compatible server")
        print("  rollout    play episodes and dump trajectories and readable transcripts")
        print("  show       print dumped episodes turn by turn")
        print("  serve      an OpenAI-compatible HTTP server of the model or a checkpoint")
        print("  config     print the composed config")
        print("  migrate    translate a ROLL agentic YAML into a roll config, with a report of every key")
        print(
            "  baselines  baselines of a config's validation episodes, or of an env (--env ID): e.g. random"
        )
        print("  plot       learning curve PNG of a run directory")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except BrokenPipeError:  # `roll show ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
