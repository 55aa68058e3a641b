"""Every micro-batch key the packages set or read is one `roll_algos.MicroBatch` names: the pipeline's row fields,
the losses' reads, the strategies' reads and writes, and the forward's key constants."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_type_hints

from roll_algos import MicroBatch

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    ROOT / "packages/roll-algos/src/roll_algos",
    ROOT / "packages/roll-strategies/src/roll_strategies",
    ROOT / "packages/roll-pipeline/src/roll_pipeline/trainer",
]
MICRO_BATCH_NAMES = {
    "mb",
    "micro_batch",
    "fields",
}  # what these modules call a micro-batch or its row tensors


def _key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def keys_used(source: str) -> set[str]:
    """String keys read from, tested in or written to a dict named as in `MICRO_BATCH_NAMES`, the keys of a dict
    literal bound to one, and the values of module constants named `*_KEY`."""
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            if node.value.id in MICRO_BATCH_NAMES:
                found.add(_key(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            target = node.func.value
            if node.func.attr == "get" and isinstance(target, ast.Name) and target.id in MICRO_BATCH_NAMES:
                found.add(_key(node.args[0]))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            right = node.comparators[0]
            if isinstance(right, ast.Name) and right.id in MICRO_BATCH_NAMES:
                found.add(_key(node.left))
        elif (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
            if name in MICRO_BATCH_NAMES and isinstance(node.value, ast.Dict):
                found.update(_key(k) for k in node.value.keys if k is not None)
            elif name.endswith("_KEY"):
                found.add(_key(node.value))
    return {k for k in found if k is not None}


def test_every_micro_batch_key_in_use_is_declared():
    declared = set(get_type_hints(MicroBatch))
    used = {key: path for src in SOURCES for path in src.rglob("*.py") for key in keys_used(path.read_text())}
    assert {"input_ids", "advantages", "old_values", "loss_scale", "reference_model"} <= set(used)
    undeclared = {key: str(path.relative_to(ROOT)) for key, path in used.items() if key not in declared}
    assert not undeclared, (
        f"micro-batch keys not named in roll_algos.MicroBatch: {undeclared}; add them there"
    )


def test_a_key_written_read_or_tested_is_found():
    source = 'X_KEY = "a"\nmb["b"] = 1\nmb.get("c")\nif "d" not in micro_batch: fields = {"e": 0}\n'
    assert keys_used(source) == {"a", "b", "c", "d", "e"}
