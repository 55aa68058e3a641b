"""The `roll` command: train, sweep, eval, rollout, show, serve, config, baselines, plot."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from roll_pipeline.launcher import ConfigError, compose, parse_args

EXAMPLES_DIR = Path(__file__).resolve().parents[4] / "examples"  # the repo's examples/ in a checkout


def _compose(args: argparse.Namespace, prog: str) -> Any:
    """The checked config of the command line (every check `roll train` makes before a worker starts),
    or None after printing what was wrong."""
    try:
        return compose(
            args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR, preflight=True
        )
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None


def _train_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true", help="print every metric each step")


def train(argv: list[str]) -> int:
    """Compose and check the config (before any worker starts), run the pipeline, print the report."""
    args = parse_args(argv, extra=_train_options)
    config = _compose(args, "roll train")
    if config is None:
        return 2
    from roll_pipeline.report import print_final_report, print_run_header

    print_run_header(config)
    from roll_pipeline.pipeline import AgenticPipeline

    pipeline = AgenticPipeline(config, progress=not args.no_progress, verbose=args.verbose)
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
    from roll_pipeline.sweep_runner import SweepError

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
    from roll_pipeline.sweep_runner import SweepError, parse_seeds, plan_sweep, run_sweep

    if args.seeds is None:
        raise SweepError("give the seeds, e.g. --seeds 1,2,3 (or --report DIR to tabulate existing runs)")
    seeds = parse_seeds(args.seeds)
    if args.parallel < 1:
        raise SweepError(f"--parallel {args.parallel}: give 1 or more runs at once")
    config = _compose(args, "roll sweep")
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
    from roll_pipeline.sweep import read_seed, report_run_dirs

    run_dirs = report_run_dirs(args.report)
    results = sorted((read_seed(d) for d in run_dirs), key=lambda r: (r.seed is None, r.seed or 0))
    names = {d.name.rsplit("_seed", 1)[0] for d in run_dirs}
    base = names.pop() if len(names) == 1 else None
    out = args.out or run_dirs[0].parent / (f"{base}_sweep" if base else "sweep")
    return _sweep_finish(results, out, {"exp_name": base, "seeds": [r.seed for r in results]})


def _sweep_finish(results: list[Any], out: Path, meta: dict[str, Any]) -> int:
    """Print the table, write sweep.json / sweep.md / sweep.png; 1 when a seed failed, else 0."""
    from roll_pipeline.plotting import plot_sweep
    from roll_pipeline.sweep import CLOCK, format_table, write_report

    json_path, md_path = write_report(results, out, meta)
    with_config = [r.run_dir for r in results if (r.run_dir / "config.json").exists()]
    png = plot_sweep(results, out / "sweep.png", _run_baselines(with_config[0]) if with_config else None)
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
    config = _compose(args, "roll config")
    if config is None:
        return 2
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return 0


def _openai_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("policy from an OpenAI-compatible server (instead of the HF model)")
    group.add_argument("--openai-base-url", default=None, help="e.g. http://127.0.0.1:8000/v1")
    group.add_argument("--openai-model", default=None, help="model name the server serves")
    group.add_argument("--openai-endpoint", choices=["completions", "chat"], default="completions")
    group.add_argument("--openai-api-key-env", default="OPENAI_API_KEY", help="env var holding the key")
    group.add_argument("--openai-concurrency", type=int, default=8)
    group.add_argument("--openai-timeout", type=float, default=60.0, help="seconds per request")
    group.add_argument("--openai-retries", type=int, default=3)


def _eval_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a checkpoint folder, or a run folder (its newest verified checkpoint); default: the config's model",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--episodes", type=int, default=None, help="default: val_rollout_batch_size")
    _openai_options(parser)


def _rollout_options(parser: argparse.ArgumentParser) -> None:
    _eval_options(parser)
    parser.add_argument("--dump", type=Path, required=True, help="folder for trajectories and transcripts")


def evaluate_command(argv: list[str], prog: str = "roll eval") -> int:
    """Validation episodes (fixed held-out seeds, greedy) of a model, checkpoint or OpenAI-compatible server."""
    options = _rollout_options if prog == "roll rollout" else _eval_options
    args = parse_args(argv, prog, evaluate_command.__doc__ or "", options)
    config = _compose(args, prog)
    if config is None:
        return 2
    from roll_pipeline.checkpoint import CheckpointError
    from roll_pipeline.evaluate import checkpoint_model_dir, format_table, run_eval, write_json

    try:
        model_dir = checkpoint_model_dir(args.checkpoint) if args.checkpoint else None
        policy = _openai_policy(args, model_dir, config)
    except (FileNotFoundError, ValueError, CheckpointError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    dump = getattr(args, "dump", None)
    try:
        result = run_eval(
            config, model_dir, policy, episodes=args.episodes, progress=not args.no_progress, dump=dump
        )
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    print(f"[roll] policy {result['policy']}, model {result['model']}")
    from roll_pipeline.evaluate import TagReport

    print(format_table([TagReport(**t) for t in result["tags"]]))
    if args.json:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if dump is not None:
        print(f"wrote {dump}/: trajectories.msgpack, transcripts.jsonl, transcripts.md (roll show {dump})")
    return 0


def rollout_command(argv: list[str]) -> int:
    """Play episodes and dump them: `roll eval` plus `--dump DIR` (msgpack trajectories and transcripts)."""
    return evaluate_command(argv, prog="roll rollout")


def show(argv: list[str]) -> int:
    """Print dumped episodes (`roll rollout --dump DIR`) turn by turn with their rewards."""
    parser = argparse.ArgumentParser(prog="roll show", description=show.__doc__)
    parser.add_argument("dump", type=Path, help="a dump folder or its trajectories.msgpack")
    parser.add_argument("--episode", type=int, nargs="*", default=None, help="indices (default: all)")
    args = parser.parse_args(argv)
    from roll_rollout import PayloadError

    from roll_pipeline.transcripts import format_transcript, read_dump

    try:
        trajs = read_dump(args.dump)
    except (OSError, PayloadError) as exc:
        print(f"roll show: {exc}", file=sys.stderr)
        return 2
    indices = args.episode if args.episode is not None else range(len(trajs))
    for i in indices:
        if not 0 <= i < len(trajs):
            print(f"roll show: no episode {i}; the dump has {len(trajs)}", file=sys.stderr)
            return 2
        print(format_transcript(trajs[i], i))
    return 0


def _openai_policy(args: argparse.Namespace, model_dir: Path | None, config: Any) -> Any:
    """The OpenAI-compatible policy the options ask for, or None (the HF model)."""
    if args.openai_base_url is None:
        return None
    from roll_rollout.openai_policy import OpenAIPolicy, OpenAISettings
    from transformers import AutoTokenizer

    from roll_pipeline.evaluate import config_model

    if args.checkpoint is not None:
        raise ValueError("--checkpoint and --openai-base-url exclude each other: the server holds the model")
    settings = OpenAISettings(
        base_url=args.openai_base_url,
        model=args.openai_model or "default",
        endpoint=args.openai_endpoint,
        api_key_env=args.openai_api_key_env or None,
        max_concurrency=args.openai_concurrency,
        timeout_s=args.openai_timeout,
        max_retries=args.openai_retries,
        token_ids_in_response=args.openai_endpoint == "completions",
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir or config_model(config))
    return OpenAIPolicy(settings, tokenizer)


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="serve a checkpoint (or a run's newest)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None, help="default: the model folder's name")


def serve(argv: list[str]) -> int:
    """Serve the config's model (or a checkpoint) behind an OpenAI-compatible HTTP API until Ctrl-C."""
    args = parse_args(argv, "roll serve", serve.__doc__ or "", _serve_options)
    config = _compose(args, "roll serve")
    if config is None:
        return 2
    import threading

    from roll_pipeline.checkpoint import CheckpointError
    from roll_pipeline.evaluate import checkpoint_model_dir, config_model, inference_server
    from roll_pipeline.serve import OpenAICompatibleServer

    try:
        model = checkpoint_model_dir(args.checkpoint) if args.checkpoint else None
    except (FileNotFoundError, CheckpointError) as exc:
        print(f"roll serve: {exc}", file=sys.stderr)
        return 2
    model = model or config_model(config)
    backend = inference_server(config, model)
    name = args.served_model_name or (
        Path(str(model)).parents[2].name if args.checkpoint else Path(str(model)).name
    )
    tokenizer = backend.worker.strategy.tokenizer
    with OpenAICompatibleServer(backend.policy, tokenizer, name, host=args.host, port=args.port) as server:
        print(f"[roll] serving {model} as {name!r} at {server.url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print("[roll] stopped")
    return 0


def baselines(argv: list[str]) -> int:
    """Print an env's reference baselines on held-out episodes: FrozenLake's random policy and best fixed
    move sequence (the default), Sokoban's random policy and optimal (BFS) policy."""
    parser = argparse.ArgumentParser(prog="roll baselines", description=baselines.__doc__)
    parser.add_argument("--env", default="frozen_lake", help="registered env id (default frozen_lake)")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=None, help="moves per episode (default: the env's)")
    args = parser.parse_args(argv)
    from roll_envs import RollEnvsError

    from roll_pipeline.report import env_id_baselines

    try:
        found = env_id_baselines(args.env, args.episodes, args.max_steps)
    except (ValueError, RollEnvsError) as exc:
        print(f"roll baselines: {exc}", file=sys.stderr)
        return 2
    for name, value in found.success.items():
        print(f"{name:>28}: {value:.3f}")
    for name, value in found.details.items():
        print(f"{name:>28}: {value:g}")
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
    """The baselines of the run's tags at their turn caps, drawn as reference lines; None when no tag's
    env has any."""
    import json

    from roll_pipeline.config import AgenticConfig
    from roll_pipeline.report import baseline_lines

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
    return baseline_lines(config) or None


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
    "baselines": baselines,
    "plot": plot,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `roll` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: roll {train,sweep,eval,rollout,show,serve,config,baselines,plot} [...]\n")
        print("  train      train an agent (defaults: the tiny model on FrozenLake, CPU)")
        print("  sweep      train over several seeds; table and plot of every seed's validation curve")
        print("  eval       validation episodes of a model, checkpoint or OpenAI-compatible server")
        print("  rollout    play episodes and dump trajectories and readable transcripts")
        print("  show       print dumped episodes turn by turn")
        print("  serve      an OpenAI-compatible HTTP server of the model or a checkpoint")
        print("  config     print the composed config")
        print(
            "  baselines  an env's baselines: FrozenLake random / best fixed sequence, Sokoban random / optimal"
        )
        print("  plot       learning curve PNG of a run directory")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except BrokenPipeError:  # `roll show ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
