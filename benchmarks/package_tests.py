"""A package's test module loaded by path, for the benchmarks that time its inputs at larger sizes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_test_module(relative_path: str, name: str) -> ModuleType:
    """The module at `relative_path` (from the repository root), registered as `name` in `sys.modules` (its
    dataclasses and hypothesis strategies look themselves up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
