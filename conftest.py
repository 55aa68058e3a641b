"""Repo-wide pytest hooks: tests marked gpu / vllm / deepspeed skip cleanly where they cannot run."""

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
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
