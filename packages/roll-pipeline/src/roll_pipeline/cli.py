"""The `roll` command: `roll train`, `roll baselines`, `roll plot`, `roll config`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from roll_pipeline.launcher import ConfigError, compose, parse_args

EXAMPLES_DIR = Path(__file__).resolve().parents[4] / "examples"  # the repo's examples/ in a checkout


def train(argv: list[str]) -> int:
    """Compose and check the config (before any worker starts), run the pipeline, print the report."""
    args = parse_args(argv)
    try:
        config = compose(
            args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR, preflight=True
        )
    except ConfigError as exc:
        print(f"roll train: {exc}", file=sys.stderr)
        return 2
    from roll_pipeline.report import print_final_report, print_run_header

    print_run_header(config)
    from roll_pipeline.pipeline import AgenticPipeline

    pipeline = AgenticPipeline(config, progress=not args.no_progress)
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    print_final_report(config, summary)
    return 0


def show_config(argv: list[str]) -> int:
    """Print the composed config as YAML, after the checks `roll train` makes before it starts."""
    import yaml

    args = parse_args(argv, prog="roll config")
    try:
        config = compose(
            args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR, preflight=True
        )
    except ConfigError as exc:
        print(f"roll config: {exc}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return 0


def baselines(argv: list[str]) -> int:
    """Print FrozenLake's reference baselines (random policy, best fixed move sequence)."""
    parser = argparse.ArgumentParser(prog="roll baselines")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=None, help="moves per episode (default: the env's)")
    args = parser.parse_args(argv)
    from roll_pipeline.report import frozen_lake_baselines

    for name, value in frozen_lake_baselines(args.episodes, args.max_steps).items():
        print(f"{name:>28}: {value:.3f}")
    return 0


def plot(argv: list[str]) -> int:
    """Plot a run's learning curve (metrics.jsonl) to a PNG."""
    parser = argparse.ArgumentParser(prog="roll plot")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--out", type=Path, default=None, help="PNG path (default: RUN_DIR/learning_curve.png)"
    )
    args = parser.parse_args(argv)
    from roll_pipeline.plotting import plot_learning_curve

    out = plot_learning_curve(
        args.run_dir,
        args.out or args.run_dir / "learning_curve.png",
        _run_baselines(args.run_dir),
        _run_target_kl(args.run_dir),
    )
    print(f"wrote {out}")
    return 0


def _run_baselines(run_dir: Path) -> dict[str, float] | None:
    """FrozenLake baselines at the run's turn cap, drawn as reference lines; None for other envs."""
    import json

    from roll_pipeline.config import AgenticConfig
    from roll_pipeline.report import frozen_lake_baselines, frozen_lake_turn_cap

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
    if not any(env.env_type == "frozen_lake" for env in config.custom_envs.values()):
        return None
    found = frozen_lake_baselines(max_steps=frozen_lake_turn_cap(config))
    return {f"{name} baseline": value for name, value in found.items()}


def _run_target_kl(run_dir: Path) -> float | None:
    """The run's `target_kl` (adaptive KL control), drawn as a line on the KL panel; None when unset."""
    import json

    try:
        value = json.loads((run_dir / "config.json").read_text(encoding="utf-8")).get("target_kl")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, int | float) else None


COMMANDS = {"train": train, "config": show_config, "baselines": baselines, "plot": plot}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `roll` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: roll {train,config,baselines,plot} [...]\n")
        print("  train      train an agent (defaults: the tiny model on FrozenLake, CPU)")
        print("  config     print the composed config")
        print("  baselines  FrozenLake random / best-fixed-sequence success rates")
        print("  plot       learning curve PNG of a run directory")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
