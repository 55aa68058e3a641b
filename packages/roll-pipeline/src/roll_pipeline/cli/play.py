"""`roll eval`, `roll rollout`, `roll show`, `roll serve`: the commands that play or serve a model (cli/commands.py
dispatches to them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from roll_pipeline.cli.args import compose_checked
from roll_pipeline.config.compose import parse_args


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
    config = compose_checked(args, prog)
    if config is None:
        return 2
    from roll_pipeline.serving.evaluate import checkpoint_model_dir, format_table, run_eval, write_json
    from roll_pipeline.state.checkpoint import CheckpointError

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
    from roll_pipeline.serving.evaluate import TagReport

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

    from roll_pipeline.observe.transcripts import format_transcript, read_dump

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
    from roll_rollout.policies.openai_policy import OpenAIPolicy, OpenAISettings
    from transformers import AutoTokenizer

    from roll_pipeline.assembly.settings import config_model

    if args.checkpoint is not None:
        raise ValueError("--checkpoint and --openai-base-url exclude each other: the server holds the model")
    prefixed = sorted(tag for tag, env in config.custom_envs.items() if env.response_prefix)
    if prefixed and args.openai_endpoint == "chat":
        raise ValueError(
            f"env tags {prefixed} set response_prefix, which a chat endpoint cannot start the assistant's turn"
            " with: use --openai-endpoint completions (token-in)"
        )
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
    config = compose_checked(args, "roll serve")
    if config is None:
        return 2
    import threading

    from roll_pipeline.assembly.parts import inference_server
    from roll_pipeline.assembly.settings import config_model, run_settings
    from roll_pipeline.serving.evaluate import checkpoint_model_dir
    from roll_pipeline.serving.openai_server import OpenAICompatibleServer
    from roll_pipeline.state.checkpoint import CheckpointError

    try:
        model = checkpoint_model_dir(args.checkpoint) if args.checkpoint else None
    except (FileNotFoundError, CheckpointError) as exc:
        print(f"roll serve: {exc}", file=sys.stderr)
        return 2
    model = model or config_model(config)
    backend = inference_server(run_settings(config), model)
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
