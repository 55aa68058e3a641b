"""Loading a local HF model folder onto a device, with project errors instead of hub lookups."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from roll_strategies.errors import ModelNotFoundError, StrategyError

__all__ = ["load_model_and_tokenizer", "resolve_dtype"]

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
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer
