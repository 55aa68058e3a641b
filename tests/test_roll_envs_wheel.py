"""roll-envs as a user meets it: its wheel installed alone with pip in a fresh virtual environment,
next to the example plugin package, found through the entry point and checked, with no torch, ray
or transformers present.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = textwrap.dedent(
    """
    import importlib.util
    for heavy in ("torch", "ray", "transformers"):
        assert importlib.util.find_spec(heavy) is None, heavy + " is installed in the fresh venv"
    import roll_envs
    assert "guess_number" in roll_envs.list_envs(), roll_envs.list_envs()
    env = roll_envs.make("guess_number", max_number=8)
    assert roll_envs.check_env(env) == []
    for env_id in roll_envs.list_envs():
        if env_id != "gym_adapter":  # the sandbox plays submits, no call: isolation none runs anywhere
            config = {"isolation": "none"} if env_id == "sandbox" else {}
            assert roll_envs.check_env(roll_envs.make(env_id, **config)) == [], env_id
    import gymnasium
    gymnasium.make("roll_envs/FrozenLake-v0").reset(seed=0)
    try:
        roll_envs.make("guess_numbr")
    except roll_envs.UnknownEnvError as exc:
        assert "guess_number" in str(exc)
    print("user-ok")
    """
)


def _run(cmd: list[str], cwd: Path = ROOT, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_wheel_and_example_plugin_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    _run(["uv", "build", "--package", "roll-envs", "--wheel", "--out-dir", str(dist)])
    wheels = sorted(dist.glob("roll_envs-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            str(wheels[0]),
            str(ROOT / "examples" / "custom_env"),
        ]
    )
    proc = _run([str(python), "-c", USER_SCRIPT], cwd=tmp_path)
    assert "user-ok" in proc.stdout
    cli = venv / "bin" / "roll-envs"
    assert "guess_number" in _run([str(cli), "list"], cwd=tmp_path).stdout
    check = _run([str(cli), "check", "guess_number_env.env:GuessNumberEnv"], cwd=tmp_path)
    assert "passes every check" in check.stdout
