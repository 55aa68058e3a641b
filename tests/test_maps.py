"""The maps stay true: every module of the five packages is named in its package's map (the package README or the
docstring of the sub-package that holds it), docs/architecture.md names every sub-package, and no source file
outgrows a reading (450 lines)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").glob("*/src/*") if (p / "__init__.py").is_file())
MAX_LINES = 450


def _names(text: str, file_name: str) -> bool:
    """Whether `text` names `file_name` as a word (`train/hf_train.py` names `hf_train.py`)."""
    return re.search(rf"(?<![\w]){re.escape(file_name)}(?!\w)", text) is not None


def _docstring(package_dir: Path) -> str:
    return ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text(encoding="utf-8"))) or ""


def unmapped_modules(package: Path, readme: str) -> list[str]:
    """The modules of `package` (a source folder) named neither in `readme` nor in their sub-package's
    docstring."""
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        if not (_names(readme, path.name) or _names(_docstring(path.parent), path.name)):
            missing.append(str(path.relative_to(package.parent)))
    return missing


def test_the_map_check_finds_an_unlisted_module(tmp_path):
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text('"""`listed.py` does this."""\n')
    (package / "room" / "__init__.py").write_text('"""`inner.py` does that."""\n')
    for name in ("listed.py", "in_readme.py", "unlisted.py", "room/inner.py", "room/stray.py"):
        (package / name).write_text("")
    readme = "| `in_readme.py` | ... |\n| `unlisted_other.py` | ... |"
    assert unmapped_modules(package, readme) == ["pkg/room/stray.py", "pkg/unlisted.py"]


def test_every_module_is_on_its_package_map():
    missing = []
    for package in PACKAGES:
        readme = (package.parents[1] / "README.md").read_text(encoding="utf-8")
        missing += unmapped_modules(package, readme)
    assert missing == [], (
        "modules named in no map: add each to its package README's module table or to its sub-package's"
        f" __init__ docstring: {missing}"
    )


def test_architecture_names_every_sub_package():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = [
        str(init.parent.relative_to(package.parent))
        for package in PACKAGES
        for init in sorted(package.rglob("__init__.py"))
        if init.parent != package and f"{init.parent.name}/" not in text
    ]
    assert unnamed == [], f"sub-packages docs/architecture.md does not name (as `name/`): {unnamed}"


def test_no_source_file_is_over_the_size_limit():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in package.rglob("*.py")
    }
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert len(sizes) > 150
    assert over == {}, f"source files over {MAX_LINES} lines (split them along a seam): {over}"
