"""The seams sit below the backends: `protocols.py` and every registered backend module import no backend module
(every import counted, function-level ones too), so a backend can be added, moved or left uninstalled alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from roll_strategies.registry import STRATEGIES

SRC = Path(__file__).resolve().parents[1] / "src"
BACKENDS = sorted({spec.entry_point.split(":")[0] for spec in STRATEGIES.values()})


def imported_modules(source: str, module: str) -> set[str]:
    """Every module `source` (the text of `module`) imports, anywhere in it, relative imports resolved; for
    `from a import b` both `a` and `a.b` (b may be a module)."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def backend_imports(module: str) -> list[str]:
    """The backend modules `module` (a dotted name under SRC) imports, itself excepted."""
    source = (SRC / Path(*module.split("."))).with_suffix(".py").read_text()
    return sorted(m for m in imported_modules(source, module) & set(BACKENDS) if m != module)


def test_the_backends_are_the_registered_strategies():
    assert (
        "roll_strategies.infer.hf_infer" in BACKENDS and "roll_strategies.train.deepspeed_train" in BACKENDS
    )
    assert all((SRC / Path(*m.split("."))).with_suffix(".py").is_file() for m in BACKENDS)


@pytest.mark.parametrize("module", ["roll_strategies.protocols", *BACKENDS])
def test_no_backend_imports_a_backend(module):
    assert backend_imports(module) == [], (
        f"{module} imports the backend module(s) {backend_imports(module)}; move what it takes from them into "
        "roll_strategies.protocols (types) or a shared module under compute/, train/ or infer/ (helpers)"
    )


def test_a_function_level_or_relative_import_is_counted():
    source = "def f():\n    from ..infer import hf_infer\n    import roll_strategies.train.hf_train\n"
    found = imported_modules(source, "roll_strategies.train.critic")
    assert {"roll_strategies.infer.hf_infer", "roll_strategies.train.hf_train"} <= found
