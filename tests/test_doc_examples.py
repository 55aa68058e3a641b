"""The docs' runnable examples run: a doc example that no longer works is a bug."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_block_after(doc: Path, heading: str) -> str:
    """The first ```python block under `heading` in `doc`."""
    text = doc.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {heading!r} in {doc}"
    return match.group(1)


def run_block_after(doc: Path, heading: str, script: Path, timeout: float = 300) -> str:
    """Write the first ```python block under `heading` in `doc` to `script`, run it, and return what it printed
    (the test fails with its stderr if it exits non-zero)."""
    script.write_text(python_block_after(doc, heading))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_rollout_scheduler_example_runs(tmp_path: Path) -> None:
    stdout = run_block_after(
        DOCS / "rollout.md", "## Using the scheduler directly", tmp_path / "example.py", timeout=600
    )
    count, failed, ledger = stdout.strip().split(" ", 2)
    assert int(count) == 16 and float(failed) == 0.0
    assert "'delivered': 16" in ledger


def test_estimator_registry_example_runs(tmp_path: Path) -> None:
    stdout = run_block_after(DOCS / "algos" / "registry.md", "## Example", tmp_path / "example.py")
    assert stdout.split("\n")[:2] == ["[-0.5, 0.0, -1.0]", "step"]


def test_env_answer_format_example_runs(tmp_path: Path) -> None:
    stdout = run_block_after(DOCS / "envs" / "README.md", "## Answer formats", tmp_path / "boxed_env.py")
    instruction, *turns = stdout.strip().split("\n")
    assert instruction.endswith(r"answer like \boxed{49}.")
    assert turns == [
        "valid=False refused=False reward=0.0",
        "valid=True refused=True reward=0.0",
        "valid=True refused=False reward=1.0",
    ]


def test_policy_loss_plugin_example_runs(tmp_path: Path) -> None:
    stdout = run_block_after(
        DOCS / "algos" / "policy_loss.md", "## A loss from a plugin", tmp_path / "example.py"
    )
    assert stdout.strip() == "0.1008 1.2734"
