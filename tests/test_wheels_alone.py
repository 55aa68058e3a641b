"""Each of the five wheels, installed alone in a fresh virtual environment with only its declared
dependencies (siblings come from wheels built here, the rest from the package index), imports every
one of its modules. A module importing something its package does not declare fails here, as it
would for a user who installs that package alone.

uv installs into the venvs (its cache hard-links torch instead of downloading it again: the packages take
torch as a range, and the venvs get the workspace's own torch through its `constraint-dependencies`); the
`roll-envs` wheel is also tested with plain pip in `test_roll_envs_wheel.py`. roll-pipeline installs
without Ray (the `ray` extra): `cluster.backend=local` works, the default Ray backend says what to install.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())

IMPORT_EVERY_MODULE = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    package = importlib.import_module(sys.argv[1])
    names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    for name in names:
        importlib.import_module(name)
    print(f"imported {len(names) + 1} modules of {package.__name__} {package.__version__}")
    """
)


def _run(cmd: list[str], cwd: Path, timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    for package in PACKAGES:
        _run(["uv", "build", "--package", package, "--wheel", "--out-dir", str(dist)], cwd=ROOT)
    return dist


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
@pytest.mark.parametrize("package", PACKAGES)
def test_wheel_installs_alone_and_imports_every_module(package: str, wheels: Path, tmp_path: Path) -> None:
    module = package.replace("-", "_")
    (wheel,) = wheels.glob(f"{module}-*.whl")
    venv = tmp_path / "venv"
    _run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=tmp_path)
    python = str(venv / "bin" / "python")
    constraints = tmp_path / "constraints.txt"
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    constraints.write_text("\n".join(root["tool"]["uv"]["constraint-dependencies"]) + "\n")
    install = ["uv", "pip", "install", "--quiet", "--python", python, "--find-links", str(wheels)]
    _run([*install, "--constraint", str(constraints), str(wheel)], cwd=tmp_path)
    out = _run([python, "-c", IMPORT_EVERY_MODULE, module], cwd=tmp_path)
    assert f"modules of {module}" in out
    if package == "roll-pipeline":  # the console script works from the installed wheel, without Ray
        roll = str(venv / "bin" / "roll")
        out = _run([roll, "config", "cluster.backend=local", "max_steps=3"], cwd=tmp_path)
        assert "max_steps: 3" in out
        proc = subprocess.run([roll, "config"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 2 and "pip install 'roll-pipeline[ray]'" in proc.stderr, proc.stderr
