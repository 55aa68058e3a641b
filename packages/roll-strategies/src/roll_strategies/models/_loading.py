"""Loading a local HF model folder onto a device, with project errors instead of hub lookups."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from roll_strategies.errors import ModelNotFoundError, StrategyError

__all__ = [
    "choose_dtype",
    "cpu_matmul_rate",
    "load_model_and_tokenizer",
    "resolve_dtype",
    "warn_slow_cpu_dtype",
]

_LOG = logging.getLogger(__name__)

SLOW_DTYPE_FACTOR = 4.0
"""A half-precision dtype on the CPU is reported when its matmuls run this many times slower than float32's."""

_PROBE_WINDOW_S = 0.02
"""Each timing of `cpu_matmul_rate` repeats its multiply for this much thread CPU time (Windows' thread clock
ticks every 15.6 ms)."""

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'float32' / 'bf16' / torch.bfloat16 ... -> torch.dtype (clear error on an unknown name)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise StrategyError(
            f"Expected dtype one of {sorted(_DTYPES)}, got {dtype!r}; fix the strategy's dtype."
        ) from None


def choose_dtype(dtype: str, device: str) -> tuple[str, str]:
    """`dtype` itself, or for "auto" the precision `device` computes natively: bfloat16 on a CUDA device that
    supports it and on a CPU whose bfloat16 matmuls run at least as fast as float32's (AMX, avx512_bf16);
    float32 on a GPU without bfloat16 and on a CPU that emulates it (tens to hundreds of times slower).
    Returns the dtype and why, for the load log."""
    if dtype != "auto":
        return dtype, "as configured"
    kind = torch.device(device).type
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise StrategyError(
                f"Expected to see {device} to choose dtype auto for it, got no CUDA device in this process"
                " (a Ray worker's GPU the driver lacks); set model_args.dtype to bfloat16 or float32."
            )
        native = torch.cuda.get_device_capability(torch.device(device)) >= (8, 0)  # Ampere on
        return ("bfloat16" if native else "float32"), f"{device}: bfloat16 {'' if native else 'not '}native"
    if kind != "cpu":
        raise StrategyError(
            f"Expected dtype auto on a cpu or cuda device, got device {device!r}; set model_args.dtype"
            " to float32, bfloat16 or float16 for it."
        )
    half, full = cpu_matmul_rate(torch.bfloat16), cpu_matmul_rate(torch.float32)
    why = f"cpu: bfloat16 matmuls at {half:.2f} GFLOP/s, float32 at {full:.1f}"
    return ("bfloat16" if half >= full else "float32"), why


def load_model_and_tokenizer(
    model_path: str | Path, *, device: str, dtype: str | torch.dtype, gguf_file: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Tokenizer + causal LM from a local folder (never the hub), moved to `device` in `dtype`."""
    path = Path(model_path)
    if not path.is_dir() or not ((path / "config.json").exists() or gguf_file):
        raise ModelNotFoundError(path, "no such folder" if not path.is_dir() else "config.json missing")
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(dtype), local_files_only=True, **extra
    )
    if torch.device(device).type == "cpu":
        warn_slow_cpu_dtype(resolve_dtype(dtype))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


@functools.cache
def cpu_matmul_rate(dtype: torch.dtype, size: int = 256) -> float:
    """GFLOP/s of one core on a size^3 matrix multiply in `dtype` (best of 3 windows of at least
    `_PROBE_WINDOW_S` after a warm-up; measured once per process). One thread, timed in its own CPU time:
    whether a core computes bfloat16 natively is a property of the core, and wall-clock time on every
    thread also counts what shares the cores (a second run starting beside this one measured float32 at
    2.8 GFLOP/s and bfloat16 at 4.2, against 80 and 175 in one thread on the same machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        torch.matmul(a, b)
        best = float("inf")
        for _ in range(3):
            calls, start = 0, time.thread_time()
            while (spent := time.thread_time() - start) < _PROBE_WINDOW_S:  # coarse clocks: a window
                torch.matmul(a, b)
                calls += 1
            best = min(best, spent / calls)
    finally:
        torch.set_num_threads(threads)
    return 2 * size**3 / best / 1e9


def warn_slow_cpu_dtype(dtype: torch.dtype) -> bool:
    """Log a warning, and return True, when `dtype` is a half precision this CPU computes at least
    `SLOW_DTYPE_FACTOR` times slower than float32: a CPU without avx512_bf16 / AMX (AMD Zen 3, most laptops)
    runs bfloat16 matmuls hundreds of times slower, which no other symptom than a stalled run would show."""
    if dtype not in (torch.bfloat16, torch.float16):
        return False
    half, full = cpu_matmul_rate(dtype), cpu_matmul_rate(torch.float32)
    if half * SLOW_DTYPE_FACTOR > full:
        return False
    name = str(dtype).removeprefix("torch.")
    _LOG.warning(
        "%s matmuls on this CPU run at %.2f GFLOP/s against %.1f in float32 (%.0fx slower: the CPU lacks "
        "native %s support); set this role's model_args.dtype to float32.",
        name,
        half,
        full,
        full / half,
        name,
    )
    return True
