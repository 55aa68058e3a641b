"""Every config field is read by some code: a field that is accepted and silently does nothing is a bug.

The field list comes from the pydantic models themselves (walking `AgenticConfig` through nested models,
mappings of models and optionals), never from a hand-written list. A field counts as read when the source
of roll_pipeline (config definitions excluded: a field declaration is not an attribute access) accesses it
as an attribute (`cfg.field`, `role.training_args.field`) or through `getattr(x, "field")`. Reads that
only reject a value (a setting the pipeline cannot honour yet) count:
the user is told, nothing is silent.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from roll_pipeline.config.schema import AgenticConfig

SOURCE = Path(__file__).resolve().parents[1] / "src" / "roll_pipeline"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The config models inside an annotation (X, X | None, dict[str, X], list[X])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, UnionType, dict, list):
        return [m for arg in get_args(annotation) for m in _models(arg)]
    return []


def config_fields() -> dict[str, tuple[type[BaseModel], str]]:
    """Dotted path -> (model, field name) of every field reachable from AgenticConfig."""
    out: dict[str, tuple[type[BaseModel], str]] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}{name}"
            out[path] = (model, name)
            for sub in _models(field.annotation):
                walk(sub, f"{path}.<{sub.__name__}>." if get_origin(field.annotation) is dict else f"{path}.")

    walk(AgenticConfig, "")
    return out


def attribute_reads(root: Path = SOURCE) -> set[str]:
    """Attribute names read anywhere in the package source, plus getattr(..., "name") constants."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(str(node.args[1].value))
    return names


def test_the_walk_sees_every_model_and_nested_field():
    fields = config_fields()
    assert "actor_train.training_args.learning_rate" in fields
    assert "critic.use_sequence_packing" in fields
    assert "custom_envs.<CustomEnvConfig>.max_history_turns" in fields
    assert "cluster.address" in fields
    assert len(fields) > 100


def test_every_config_field_is_read_by_some_code():
    reads = attribute_reads()
    unread = sorted(path for path, (_, name) in config_fields().items() if name not in reads)
    assert not unread, (
        f"config fields that no code in roll_pipeline reads: {unread}. Implement them, reject the values the "
        "pipeline cannot honour (config_checks.py), or remove them."
    )


def test_the_scan_has_teeth(tmp_path):
    (tmp_path / "m.py").write_text(
        "def f(cfg):\n    cfg.seed = 3\n    return cfg.exp_name, getattr(cfg, 'gamma')\n"
    )
    reads = attribute_reads(tmp_path)
    assert {"exp_name", "gamma"} <= reads and "seed" not in reads  # an assignment is not a read
