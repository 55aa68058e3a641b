"""Builtin models shipped built: the default config's model comes with the package, so a first run skips its
warm-up (about 5 minutes on 2 cores).

A shipped build is the folder `cache._build` writes, made on the project's machine by
`tools/ship_builtin_model.py`, plus `fingerprint.txt`: a digest of everything the build is made from (the
builder's format version, the recipe and its warm-up data). `resolve_pretrain` copies a shipped build into the
cache only when that digest equals the current recipe's, so a recipe that changes without a re-shipped build is
built locally as before (and `tests/test_shipped_builds.py` fails until it is re-shipped). `ROLL_BUILD_BUILTIN=1`
ignores shipped builds. A local build of the same recipe on another CPU may differ in the last bits (float
reductions differ between CPUs); a shipped build is the one the project's measured runs used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from roll_pipeline.models.recipes import TinyModelSpec
from roll_pipeline.models.warmup import format_warmup_examples, perception_warmup_examples, vocabulary_corpus

__all__ = ["SHIPPED_DIR", "build_name", "recipe_fingerprint", "shipped_build"]

SHIPPED_DIR = Path(__file__).parent / "shipped"
FINGERPRINT_FILE = "fingerprint.txt"


def build_name(name: str, spec: TinyModelSpec) -> str:
    """The folder name of a builtin model's build, in the cache and among the shipped builds."""
    return f"{name}-v{spec.revision}-seed{spec.seed}"


def recipe_fingerprint(spec: TinyModelSpec) -> str:
    """sha256 of what a build is made from: the builder's format version, the recipe and its warm-up data."""
    from roll_strategies.models.tiny_model import TINY_MODEL_FORMAT_VERSION

    examples = format_warmup_examples(spec) + perception_warmup_examples(spec)
    payload = {
        "format_version": TINY_MODEL_FORMAT_VERSION,
        "recipe": dataclasses.asdict(spec),
        "warmup_examples": examples,
        "vocabulary": list(vocabulary_corpus()),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def shipped_build(name: str, spec: TinyModelSpec) -> Path | None:
    """The shipped folder of `name` when one exists for the current recipe (and `ROLL_BUILD_BUILTIN` is not set)."""
    if os.environ.get("ROLL_BUILD_BUILTIN", "") not in ("", "0"):
        return None
    folder = SHIPPED_DIR / build_name(name, spec)
    stamp = folder / FINGERPRINT_FILE
    if not stamp.is_file() or stamp.read_text().strip() != recipe_fingerprint(spec):
        return None
    return folder


def install_shipped(folder: Path, target: Path) -> None:
    """Copy a shipped build into the cache folder `target` (atomically, as a build is written)."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp, ignore=shutil.ignore_patterns(FINGERPRINT_FILE))
    tmp.rename(target)
