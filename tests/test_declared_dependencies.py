"""Every third-party module a package's source imports is a declared dependency of that package.

A package that imports something only a sibling declares works in the workspace and breaks when a
user installs it alone. The imports are read from the source with `ast` (lazy imports inside
functions included); the distribution behind each module name comes from the installed
environment's metadata, so `PIL` maps to `pillow` and `yaml` to `PyYAML`.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from small_runs import imported_roots

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
# Modules of optional extras that are not installed in the development environment.
NOT_INSTALLED = {"vllm": "vllm"}


def imported_top_level_modules(src: Path) -> dict[str, set[str]]:
    """Top-level module name -> the files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in src.rglob("*.py"):
        for root in imported_roots(path.read_text(encoding="utf-8")):
            found.setdefault(root, set()).add(path.name)
    return found


def normalise(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared_distributions(pyproject: Path) -> set[str]:
    """Names of the dependencies and optional dependencies, normalised (PEP 503)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    return {normalise(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]) for spec in specs}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_imported_distribution_is_declared(package: Path) -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = declared_distributions(package / "pyproject.toml")
    undeclared = []
    for module, files in sorted(imported_top_level_modules(package / "src").items()):
        if module in sys.stdlib_module_names or module.startswith("roll_"):
            continue
        owners = distributions.get(module) or [NOT_INSTALLED.get(module, module)]
        if not any(normalise(owner) in declared for owner in owners):
            undeclared.append(f"{module} ({'/'.join(owners)}, imported in {', '.join(sorted(files))})")
    assert not undeclared, f"{package.name} imports undeclared distributions: {undeclared}"


def test_sibling_imports_are_declared_too() -> None:
    for package in PACKAGES:
        declared = declared_distributions(package / "pyproject.toml") | {package.name}
        for module in imported_top_level_modules(package / "src"):
            if module.startswith("roll_"):
                assert normalise(module) in declared, f"{package.name} imports {module} undeclared"
