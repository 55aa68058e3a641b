"""Whether a YAML file is a ROLL config rather than a roll one, so `roll train` / `roll config` (and the
launcher of examples/) answer with the `roll migrate` command instead of a list of unknown keys.

A file is taken for ROLL's when its `defaults` pull in a file `@_here_` (ROLL's env defaults files; roll's
configs start from `roll_defaults` / `roll_tiny`), or when it sets at least `MIN_KEYS` top-level keys that
ROLL's AgenticConfig has and roll's does not (logging_dir, num_gpus_per_node, reward_normalization, ...).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from roll_pipeline.roll_keys.upstream import ROLL_FIELDS

__all__ = ["MIN_KEYS", "roll_config_message", "roll_markers"]

MIN_KEYS = 3
"""ROLL-only top-level keys that make a file without ROLL-style defaults a ROLL config."""


def roll_markers(path: Path, roll_fields: Collection[str]) -> list[str]:
    """What marks `path` as a ROLL config (empty when it does not look like one, or does not parse); `roll_fields`
    are roll's own top-level keys (`AgenticConfig.model_fields`)."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return []
    if not isinstance(raw, dict):
        return []
    defaults = raw.get("defaults") if isinstance(raw.get("defaults"), list) else []
    markers = [f"defaults entry {e!r}" for e in defaults if isinstance(e, str) and "@_here_" in e]
    ours = set(roll_fields)
    only_roll = sorted(k for k in raw if isinstance(k, str) and k in ROLL_FIELDS and k not in ours)
    if markers or len(only_roll) >= MIN_KEYS:
        return markers + only_roll
    return []


def roll_config_message(path: Path, markers: list[str]) -> str:
    """The error of a ROLL config given to a roll command: what marks it and the command that translates it."""
    shown = ", ".join(markers[:6]) + (f" and {len(markers) - 6} more" if len(markers) > 6 else "")
    name = f"{path.stem}_roll"
    return (
        f"{path} is a ROLL config ({shown}); roll does not read ROLL's files as they are. Translate it first:\n"
        f"  roll migrate {path} -o {name}.yaml\n"
        f"then run the result: roll train --config-path . --config-name {name}\n"
        "(examples/start_agentic_pipeline.py does the first step with --migrate; docs/migrating_from_roll.md lists what maps)"
    )
