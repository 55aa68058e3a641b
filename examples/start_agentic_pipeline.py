"""Launch the agentic pipeline from a YAML config, as in the upstream docs.

    python examples/start_agentic_pipeline.py --config_path tiny-cpu-agentic --config_name agent_val_frozen_lake
    python examples/start_agentic_pipeline.py --config-path tiny-cpu-agentic --config-name agent_val_frozen_lake \
        exp_name=my_run seed=123

`--config_path` is looked up relative to the current folder first, then to this examples/ folder.
Same as `roll train` with the same arguments.

Given one of ROLL's own agentic configs, it says so and prints the `roll migrate` command; with `--migrate`
(and `--drop-unsupported`) it runs that migration instead of training: NAME_roll.yaml in the current folder,
and the report of every ROLL key (docs/migrating_from_roll.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from roll_pipeline.cli import args as cli_args
from roll_pipeline.cli import commands as cli
from roll_pipeline.cli.migrate import default_output, run_migration


def migrate(argv: list[str]) -> int:
    """`--migrate`: translate the named ROLL config into NAME_roll.yaml (roll migrate), train nothing."""
    parser = argparse.ArgumentParser(prog="start_agentic_pipeline.py --migrate")
    parser.add_argument("--config-path", "--config_path", dest="config_path", required=True)
    parser.add_argument("--config-name", "--config_name", dest="config_name", required=True)
    parser.add_argument("--migrate", action="store_true")
    parser.add_argument(
        "--drop-unsupported", "--drop_unsupported", dest="drop_unsupported", action="store_true"
    )
    args = parser.parse_args(argv)
    name = args.config_name.removesuffix(".yaml")
    candidates = [
        Path(args.config_path) / f"{name}.yaml",
        cli_args.EXAMPLES_DIR / args.config_path / f"{name}.yaml",
    ]
    source = next((c for c in candidates if c.is_file()), None)
    if source is None:
        print(f"no {name}.yaml in {' or '.join(str(c.parent) for c in candidates)}", file=sys.stderr)
        return 2
    return run_migration(
        source,
        default_output(source),
        drop_unsupported=args.drop_unsupported,
        prog="start_agentic_pipeline.py",
    )


if __name__ == "__main__":
    cli_args.EXAMPLES_DIR = Path(__file__).resolve().parent
    argv = sys.argv[1:]
    sys.exit(migrate(argv) if "--migrate" in argv else cli.train(argv))
