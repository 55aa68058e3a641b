"""`roll migrate ROLL_YAML [-o OUT] [--drop-unsupported]`: a ROLL agentic config translated into a roll config,
with the report of every key (roll_pipeline.migrate, docs/migrating_from_roll.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["default_output", "migrate_command", "run_migration"]


def default_output(source: Path) -> Path:
    """Where `roll migrate` writes without `-o`: `NAME_roll.yaml` in the current folder."""
    return Path.cwd() / f"{source.stem}_roll.yaml"


def run_migration(source: Path, out: Path, *, drop_unsupported: bool, prog: str) -> int:
    """Migrate `source` into `out`, print the report and how to check the result; 0, or 2 on an error."""
    from roll_pipeline.migrate.report import MigrationError
    from roll_pipeline.migrate.translate import migrate_file, to_yaml

    if out.resolve() == source.resolve():
        print(f"{prog}: -o {out} is the ROLL file itself; write the roll config elsewhere", file=sys.stderr)
        return 2
    try:
        config, report = migrate_file(source, drop_unsupported=drop_unsupported)
    except MigrationError as exc:
        partial = getattr(exc, "report", None)
        if partial is not None:
            print(partial.format())
        print(f"\n{prog}: {exc}", file=sys.stderr)
        return 2
    print(report.format(drop_unsupported=drop_unsupported))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_yaml(config, str(source)), encoding="utf-8")
    folder = out.parent if out.parent != Path.cwd() else Path(".")
    print(f"\nwrote {out}")
    print(f"check it: roll config --config-path {folder} --config-name {out.stem}")
    print(f"train:    roll train --config-path {folder} --config-name {out.stem}")
    return 0


def migrate_command(argv: list[str]) -> int:
    """Translate a ROLL agentic config (its Hydra defaults and interpolations resolved) into a roll config
    that runs the same experiment as far as roll can, and print what became of every ROLL key."""
    parser = argparse.ArgumentParser(prog="roll migrate", description=migrate_command.__doc__)
    parser.add_argument(
        "roll_yaml", type=Path, help="a ROLL agentic YAML file (its defaults files beside it)"
    )
    parser.add_argument(
        "-o", "--out", type=Path, default=None, help="the roll YAML to write (default: ./NAME_roll.yaml)"
    )
    parser.add_argument(
        "--drop-unsupported",
        action="store_true",
        help="migrate without the settings roll cannot honour (listed in the report) instead of failing",
    )
    args = parser.parse_args(argv)
    if not args.roll_yaml.is_file():
        print(
            f"roll migrate: {args.roll_yaml} is not a file; give the path of a ROLL YAML config",
            file=sys.stderr,
        )
        return 2
    out = args.out or default_output(args.roll_yaml)
    return run_migration(args.roll_yaml, out, drop_unsupported=args.drop_unsupported, prog="roll migrate")
