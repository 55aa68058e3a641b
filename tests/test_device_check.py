"""tools/device_check.py --dry-run: the device check's code path on the CPU, in a subprocess that cannot import
Ray, vLLM or DeepSpeed (what the device machine lacks), with only the packages' src folders on PYTHONPATH."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = [
    ROOT / "packages" / name / "src"
    for name in ("roll-envs", "roll-rollout", "roll-algos", "roll-strategies", "roll-pipeline")
]

BLOCKER = """
import importlib.abc, importlib.util, runpy, sys

BLOCKED = ("ray", "vllm", "deepspeed")
find_spec = importlib.util.find_spec


class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the device check must not need it)")
        return None


def absent(name, package=None):  # availability probes (transformers, accelerate) see them uninstalled
    return None if name.split(".")[0] in BLOCKED else find_spec(name, package)


importlib.util.find_spec = absent
sys.meta_path.insert(0, Blocked())
sys.argv = ["device_check.py", *sys.argv[1:]]
runpy.run_path(TOOL, run_name="__main__")
"""


@pytest.mark.timeout(1800)
def test_the_dry_run_needs_only_torch_and_transformers(tmp_path):
    # not named for Ray: a test with the word runs on the Ray tests' worker (conftest.py), and this one starts none
    out = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in SRC), "HF_HUB_OFFLINE": "1"}
    script = BLOCKER.replace("TOOL", repr(str(ROOT / "tools" / "device_check.py")))
    args = [
        "--dry-run",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
        "--record",
        str(tmp_path / "record"),
    ]
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["device"] == "cpu" and report["imported"] == []
    assert "errors" not in report and set(report["section_seconds"]) == {
        "model",
        "strategies",
        "generation",
        "mfu",
        "share_prefix",
        "roll_train",
        "default_train",
    }
    generation = report["generation"]  # float32: the slot decoder's greedy tokens are generate's
    assert generation["static"]["rows_equal_to_generate"] == generation["prompts"] == 6
    assert generation["generate"]["tokens_per_second"] > 0 and "static_graphs" not in generation
    assert report["mfu"]["tokens_per_second"] > 0 and report["mfu"]["defer_sync"] is False
    default = report["default_train"]
    assert default["steps"] == 1 and default["validation"][-1]["step"] == 1
    assert 0 <= default["validation"][-1]["val/score/mean"] <= 1
    assert report["commit"] and (tmp_path / "record").is_dir()
    (kept,) = (tmp_path / "record").iterdir()
    assert json.loads(kept.read_text())["commit"] == report["commit"]
    shared = report["share_prefix"]  # float32: the prefix tree's log-probs are the dense ones
    assert shared["dense_seconds"] > 0 and shared["max_abs_log_prob_diff"] < 1e-4
    assert [(g["rows"], g["prompt_tokens"]) for g in shared["sweep"]] == [(6, 40)]
    assert all(g["dense_seconds"] > 0 and g["shared_seconds"] > 0 for g in shared["sweep"])
    assert report["train"]["tokens_per_second"] > 0 and report["infer"]["tokens_per_second"] > 0
    assert report["weight_sync"]["transport"] == "cpu" and report["weight_sync"]["seconds"] > 0
    assert report["offload"]["bytes_moved"] > 0 and report["offload"]["gpu_freed_bytes"] == 0
    assert report["offload"]["repeat_offload_seconds"] > 0 and report["offload"]["repeat_reload_seconds"] > 0
    run = report["roll_train"]
    assert run["steps"] == 2 and [s["step"] for s in run["per_step"]] == [1, 2]
    assert run["per_step"][-1]["weight_sync/version"] == 2


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path, monkeypatch):
    """One measurement that raises does not lose the others: its traceback goes under `errors`, the JSON is
    written after each section, and the exit status says something failed."""
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "tools" / "device_check.py")
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "device_check", tool)  # its dataclasses look their module up
    spec.loader.exec_module(tool)
    out = tmp_path / "report.json"
    report: dict = {}

    def broken() -> dict:
        raise RuntimeError("no such kernel")

    tool._section(report, out, "strategies", broken)
    tool._section(report, out, "roll_train", lambda: {"roll_train": {"steps": 2}})
    written = json.loads(out.read_text())
    assert "RuntimeError: no such kernel" in written["errors"]["strategies"]
    assert written["roll_train"] == {"steps": 2} and set(written["section_seconds"]) == {
        "strategies",
        "roll_train",
    }


def test_the_gpu_tests_section_runs_pytest_without_the_repos_addopts(tmp_path, monkeypatch):
    """The device has no xdist or benchmark plugin: the section's pytest must not read pyproject's addopts,
    and must see the check's own modules; its summary is pytest's last line."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import device_sections

    test = tmp_path / "test_marked.py"
    test.write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_one():\n    import device_sections  # on the check's sys.path, not PYTHONPATH\n"
    )
    monkeypatch.setattr(device_sections, "GPU_TEST_FILES", (str(test),))
    result = device_sections.gpu_tests(timeout=120)["gpu_tests"]
    assert result["returncode"] == 0 and "1 passed" in result["summary"], result
