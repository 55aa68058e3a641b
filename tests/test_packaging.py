"""Each package builds a wheel of its own, with its own version."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_each_package_builds_a_wheel(tmp_path):
    assert PACKAGES == ["roll-algos", "roll-envs", "roll-pipeline", "roll-rollout", "roll-strategies"]
    for package in PACKAGES:
        proc = subprocess.run(
            ["uv", "build", "--package", package, "--wheel", "--out-dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        meta = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
        wheel = tmp_path / f"{package.replace('-', '_')}-{meta['version']}-py3-none-any.whl"
        assert wheel.exists(), sorted(p.name for p in tmp_path.iterdir())
        names = zipfile.ZipFile(wheel).namelist()
        module = package.replace("-", "_")
        assert f"{module}/__init__.py" in names and f"{module}/py.typed" in names
        assert not any("/tests/" in n for n in names)


def test_versions_changelogs_and_sibling_ranges():
    for package in PACKAGES:
        folder = ROOT / "packages" / package
        meta = tomllib.loads((folder / "pyproject.toml").read_text())
        version = meta["project"]["version"]
        assert version in (folder / "CHANGELOG.md").read_text(), f"{package}: CHANGELOG.md lacks {version}"
        for dep in meta["project"]["dependencies"]:
            if dep.startswith("roll-"):
                assert ">=" in dep and "<" in dep, f"{package}: sibling {dep} needs a compatible range"
        init = (folder / "src" / package.replace("-", "_") / "__init__.py").read_text()
        assert f'__version__ = "{version}"' in init, f"{package}: __version__ differs from pyproject"
