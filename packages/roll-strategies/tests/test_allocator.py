"""glibc's malloc set to give freed tensors back to the OS (`roll_strategies.workers.allocator`).

The churn runs in a fresh interpreter each time, so the allocator starts from its defaults: a 16 MiB tensor is
freed (glibc raises its mmap threshold to 16 MiB, as the first freed layer-sized tensor of a run does), then a
worker thread allocates 48 tensors of 4 MiB between small long-lived ones and frees the large ones, as a step's
activations and gradients are freed around what outlives the step (in-process workers run in threads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from roll_strategies import ProcessMemory, heap_stats, release_freed_memory
from roll_strategies.workers import allocator
from roll_strategies.workers.allocator import TUNING_ENV, configure_allocator

pytestmark = pytest.mark.skipif(heap_stats() is None, reason="glibc >= 2.33 only (mallinfo2, malloc_trim)")

MiB = 1 << 20
FREED = 48 * 4 * MiB

CHURN = """
import importlib.util, json, os, sys, threading
import torch

# the module alone, by its path: the package would import transformers (seconds, for nothing here)
spec = importlib.util.spec_from_file_location("allocator", sys.argv[2])
allocator = sys.modules["allocator"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)
configured = allocator.configure_allocator() if sys.argv[1] == "configured" else False
torch.ones(4 << 20).sum()  # 16 MiB, freed at once
kept = []

def step():
    large = []
    for _ in range(48):
        large.append(torch.ones(1 << 20))  # 4 MiB
        kept.append(torch.ones(1024))  # 4 KiB that outlive the step
    del large

worker = threading.Thread(target=step)
worker.start()
worker.join()
held = allocator.heap_stats().free
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
released = rss - allocator.release_freed_memory().rss_bytes
print(json.dumps({"configured": configured, "held": held, "released": released}))
"""


def churn(mode: str, **env: str) -> dict[str, int]:
    """Run the churn in a fresh interpreter: whether the allocator was configured, the bytes the heap held freed
    after the step, and how much the resident set fell at `release_freed_memory` then."""
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode, allocator.__file__],
        capture_output=True,
        text=True,
        check=True,
        env={**_without_malloc_settings(os.environ), "OMP_NUM_THREADS": "1", **env},
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(mode, {k: v / MiB if k != "configured" else v for k, v in result.items()})  # MiB, shown with -s
    return result


def _without_malloc_settings(environ: dict[str, str]) -> dict[str, str]:
    """The environment without glibc's MALLOC_* settings and ROLL_MALLOC_TUNING: the churn starts from defaults."""
    return {k: v for k, v in environ.items() if not k.startswith("MALLOC_") and k != TUNING_ENV}


@pytest.mark.slow
def test_by_default_glibc_keeps_a_threads_freed_tensors_resident_and_trim_returns_them():
    """The mechanism the fix is for: 192 MiB freed in a thread stay on the heap, resident, until trimmed."""
    out = churn("default")
    assert not out["configured"]
    assert out["held"] >= FREED * 3 // 4
    assert out["released"] >= FREED // 2  # malloc_trim(0) gave the freed pages back


@pytest.mark.slow
def test_configured_allocator_maps_large_tensors_so_freeing_them_leaves_nothing_held():
    out = churn("configured")
    assert out["configured"]
    assert out["held"] < 16 * MiB  # was >= 144 MiB by default (the test above)
    assert out["released"] < 16 * MiB  # nothing left to trim


def test_opting_out_leaves_malloc_as_it_is(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(64 * MiB))  # glibc's own setting, read at start-up
    assert configure_allocator() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    for off in ("0", "off", "False"):
        monkeypatch.setenv(TUNING_ENV, off)
        assert configure_allocator() is False
        assert release_freed_memory().pid == os.getpid()  # no trim; the report still comes


def test_release_reports_this_process():
    report = release_freed_memory()
    assert isinstance(report, ProcessMemory)
    assert report.pid == os.getpid() and report.rss_bytes > 0
