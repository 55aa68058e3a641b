"""`roll-envs`: list the registered envs, play one by hand, or check a user's env class.

roll-envs list
roll-envs play frozen_lake --seed 3            # type Left, or <answer>Left</answer>; :q quits
roll-envs play sokoban --set dim_x=8 --set num_boxes=2
roll-envs check my_pkg.env:MyEnv             # or a registered id
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from roll_envs.errors import RollEnvsError
from roll_envs.hints import hint_report


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """`["size=5", "is_slippery=true"]` -> `{"size": 5, "is_slippery": True}` (values read as JSON if they can be)."""
    config: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects KEY=VALUE; got {pair!r}")
        try:
            config[key] = json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
    return config


def build_env(target: str, config: dict[str, Any]) -> Any:
    """A registered id, or `module:Class` of a user's env, built with `config`."""
    import roll_envs
    from roll_envs.registry import EnvSpec

    if ":" in target:
        return EnvSpec(target, target).make(**config)
    return roll_envs.make(target, **config)


def _summary(info: dict[str, Any]) -> str:
    keys = ("action_is_valid", "action_is_refused", "action_is_effective", "success", "executed_actions")
    shown = {k: info[k] for k in keys if k in info}
    return json.dumps({**shown, "metrics": info.get("metrics", {})}, ensure_ascii=False)


def play(
    env: Any, seed: int, read: Callable[[str], str] = input, write: Callable[[str], None] = print
) -> float:
    """Play turns typed by a person until the episode ends or they type `:q`; returns the episode return.

    A line that is not yet an answer in the env's answer format is written as one: with `<answer>` tags
    `left` plays `<answer>left</answer>`, with `boxed` `\\boxed{left}`; with `raw` every line is played as typed.
    """
    from roll_envs.checker_answers import answer_format, answer_text

    marker = {"tags": "<answer>", "boxed": "\\boxed", "tool_call": "{", "raw": ""}[answer_format(env)]
    write(f"--- instruction ---\n{env.instruction}")
    obs, _ = env.reset(seed=seed)
    write(f"--- seed {seed} ---\n{obs}")
    total = 0.0
    while True:
        try:
            line = read("action> ").strip()
        except EOFError:
            break
        if line in (":q", ":quit"):
            break
        text = line if marker in line.lower() else answer_text(env, line)
        obs, reward, terminated, truncated, info = env.step(text)
        total += reward
        write(
            f"{obs}\nreward {reward:+.2f} (return {total:+.2f}) terminated={terminated} truncated={truncated}"
        )
        write(f"info {_summary(info)}")
        if terminated or truncated:
            write("--- episode over ---")
            break
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `roll-envs` command."""
    parser = argparse.ArgumentParser(
        prog="roll-envs", description="roll-envs: text environments for LLM agents"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered envs")
    p_play = sub.add_parser("play", help="play an env by hand, turn by turn")
    p_play.add_argument("env", help="registered id (roll-envs list) or module:Class")
    p_play.add_argument("--seed", type=int, default=0)
    p_play.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config value")
    p_check = sub.add_parser("check", help="run check_env on an env")
    p_check.add_argument("target", help="module:Class of your env, or a registered id")
    p_check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config value")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except RollEnvsError as exc:
        print(f"roll-envs: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import roll_envs

    if args.command == "list":
        for spec in roll_envs.registry.registered_specs():
            print(f"{spec.id:32s} {spec.description}")
        for space in roll_envs.registry.registered_namespaces():  # a library's ids, resolved on first use
            print(f"{space.prefix + ':*':32s} {space.description}")
        return 0
    target, settings = args.env if args.command == "play" else args.target, parse_settings(args.set)
    env = build_env(target, settings)
    if args.command == "play":
        play(env, args.seed)
        return 0
    problems = roll_envs.check_env(env, raise_on_error=False, make_env=lambda: build_env(target, settings))
    print("Hosting hints (how roll runs its calls; roll_envs.hints):")
    for line in hint_report(env):
        print(f"  {line}")
    if problems:
        print(f"{type(env).__name__} fails {len(problems)} check(s):")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print(f"{type(env).__name__} passes every check.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
