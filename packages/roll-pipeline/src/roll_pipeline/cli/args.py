"""What every `roll` command shares: where example configs are found and the checked compose of a command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from roll_pipeline.config.compose import ConfigError
from roll_pipeline.preflight import compose

EXAMPLES_DIR = Path(__file__).resolve().parents[5] / "examples"  # the repo's examples/ in a checkout


def compose_checked(args: argparse.Namespace, prog: str) -> Any:
    """The checked config of the command line (every check `roll train` makes before a worker starts),
    or None after printing what was wrong; settings that work against each other are printed as warnings
    (`config.contradictions`)."""
    from roll_pipeline.config.contradictions import config_warnings

    try:
        config = compose(
            args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR, preflight=True
        )
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    for warning in config_warnings(config):
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    return config
