"""Repo-wide pytest hooks: tests marked gpu / vllm / deepspeed skip cleanly where they cannot run; the suite runs
on two pytest-xdist workers (`-n auto --dist loadfile` in pyproject's addopts), a file's tests on one, every Ray
test on the same one."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# DeepSpeed builds a small communication op on first use (about a minute on the CPU); keep it across runs in
# the repository's ignored .cache/ instead of rebuilding it per machine user or per temp dir.
_CACHE = Path(__file__).resolve().parent / ".cache"
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(_CACHE / "torch_extensions"))
# Converted GGUF models and fetched model packages (roll_strategies.models.gguf), kept across runs, never committed.
os.environ.setdefault("ROLL_CACHE_DIR", str(_CACHE / "roll"))


TEST_WORKERS = 2
"""Workers of `-n auto`: on 2 cores much of a test is one core's Python, a process start-up or a wait, which a
second worker fills; more would mostly add copies of the session fixtures."""

RAY_GROUP = "ray"
"""The word that names a Ray test: in its file's name or its own (`_in_ray_group`)."""


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest would refuse it in a run without the plugin
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: TEST_WORKERS, or none (the tests run in this process) where a worker would spoil the run: timed
    benchmarks (`--benchmark-enable`), output shown as it comes (`-s`), or a machine of one core."""
    if config.getoption("benchmark_enable", False) or config.getoption("capture") == "no":
        return 0
    return TEST_WORKERS if (os.cpu_count() or 1) > 1 else 0


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own choice
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile`, but every Ray test in one unit of work: one worker runs them all, one Ray instance on
    the machine as in a serial run (two at once starve each other's actors on 2 cores). The unit goes first
    (the workers sort it first), so its long run starts at once while the other worker takes the files."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return RAY_GROUP if _in_ray_group(nodeid) else super()._split_scope(nodeid)

    config.option.loadscopereorder = False  # keep the collection's order: the Ray unit first
    return RayTestsTogether(config, log)


def _in_ray_group(nodeid: str) -> bool:
    """Whether `ray` is a word of the test's file name or of its own name (without parameters)."""
    path, _, name = nodeid.partition("::")
    words = Path(path).stem.split("_") + name.partition("[")[0].split("_")
    return RAY_GROUP in words


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {
        "gpu": None if _has_cuda() else "needs a CUDA device",
        "vllm": None
        if importlib.util.find_spec("vllm")
        else "needs the vllm extra (uv sync --all-packages --extra vllm)",
        "deepspeed": None
        if importlib.util.find_spec("deepspeed")
        else "needs the deepspeed extra (uv sync --all-packages --extra deepspeed)",
    }
    for item in items:
        for marker, reason in reasons.items():
            # the marker itself: `item.keywords` also holds node names (a checkout folder named gpu)
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker sorts alike, so their collections still agree. In the Ray unit the tests with a Ray
        # instance of their own (`ray_four_gpus`) go first: started before the session's instance, that one is
        # not stopped for them and started again after (a stop and a start less).
        items.sort(
            key=lambda item: (
                not _in_ray_group(item.nodeid),
                "ray_four_gpus" not in getattr(item, "fixturenames", ()),
            )
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "ray" in item.keywords and not _in_ray_group(item.nodeid):
        pytest.fail(
            "A test marked ray needs the word 'ray' in its file name or its own name: pytest-xdist then runs it on"
            " the worker that runs every Ray test (conftest.py), not beside them with a Ray instance of its own."
        )
