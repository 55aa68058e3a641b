"""Build a builtin model from its recipe and ship it with roll-pipeline (`roll_pipeline.models.shipped_builds`).

    uv run python tools/ship_builtin_model.py tiny-frozen-lake-sighted

Writes packages/roll-pipeline/src/roll_pipeline/models/shipped/<name>-v<revision>-seed<seed>/ (the folder a local
build writes, about 1.6 MB) and its `fingerprint.txt`. Run it after changing a shipped model's recipe, its warm-up
data or the builder (tests/test_shipped_builds.py fails until then). `--compare FOLDER` also reports whether the
fresh build's weights equal those of FOLDER bit for bit (e.g. a build in ~/.cache/roll/models).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from roll_pipeline.models.cache import _build
from roll_pipeline.models.recipes import BUILTIN_MODELS
from roll_pipeline.models.shipped_builds import FINGERPRINT_FILE, SHIPPED_DIR, build_name, recipe_fingerprint


def _same_weights(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    left, right = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return left.keys() == right.keys() and all(bool((left[k] == right[k]).all()) for k in left)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", choices=sorted(BUILTIN_MODELS))
    parser.add_argument(
        "--compare", type=Path, help="a build folder to compare the fresh build's weights with"
    )
    args = parser.parse_args(argv)
    spec = BUILTIN_MODELS[args.name]
    target = SHIPPED_DIR / build_name(args.name, spec)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    _build(spec, target)
    (target / FINGERPRINT_FILE).write_text(recipe_fingerprint(spec) + "\n")
    print(f"shipped {target}")
    if args.compare is not None:
        print(f"weights equal to {args.compare}: {_same_weights(target, args.compare)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
