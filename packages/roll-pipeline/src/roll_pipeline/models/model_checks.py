"""The preflight checks of the model a run loads (`roll_pipeline.preflight` runs them with the others): `pretrain`
names a model that is here or can be fetched, the stop strings are text its tokenizer can produce, and its
architecture takes a prefix tree (`share_prefix`). Only a tokenizer or a small random instance is loaded.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

__all__ = ["check_pretrain", "check_share_prefix", "check_stop_strings"]


def check_pretrain(pretrain: Any, gguf_file: Any = None) -> list[str]:
    """A problem unless `pretrain` is a known `builtin:NAME`, a local folder holding a model, or a hub id
    whose snapshot is in the Hugging Face cache (or, unless HF_HUB_OFFLINE=1, that the hub lists)."""
    from roll_pipeline.models.hub import hub_problem, is_hub_id
    from roll_pipeline.models.recipes import BUILTIN_MODELS

    if not isinstance(pretrain, str):
        return []  # the schema reports the wrong type
    if pretrain.startswith("builtin:"):
        name = pretrain.removeprefix("builtin:")
        if name in BUILTIN_MODELS:
            return []
        return [
            f"pretrain={pretrain!r}: no builtin model {name!r}; available: "
            f"{', '.join(f'builtin:{n}' for n in sorted(BUILTIN_MODELS))}, or a local model folder"
        ]
    needed_gguf = gguf_file if isinstance(gguf_file, str) and gguf_file else None
    if is_hub_id(pretrain):
        problem = hub_problem(pretrain, needed_gguf)
        return [problem] if problem else []
    path = Path(pretrain).expanduser()
    if path.is_dir():
        needed = needed_gguf or "config.json"
        if (path / needed).is_file():
            return []
        return [
            f"pretrain={pretrain!r}: the folder has no {needed}; point pretrain at a Hugging Face model folder"
        ]
    return [
        f"pretrain={pretrain!r} is neither a folder nor a Hugging Face hub id (Org/Name); set pretrain to a "
        "local model folder, a hub id such as Qwen/Qwen2.5-0.5B-Instruct, or builtin:tiny-frozen-lake"
    ]


def check_stop_strings(stop_strings: Any, pretrain: Any, gguf_file: Any = None) -> list[str]:
    """Problems of `actor_infer.generating_args.stop_strings` against the model's own tokenizer.

    An empty string is a problem (it would end every response at once), and so is a string the tokenizer
    cannot produce: its own encode/decode round trip loses it (characters that encode to unk, or text its
    normaliser rewrites), so no sampled text could ever contain it. Only the tokenizer is loaded, from the
    folder the run will load: a built `builtin:` model (built now if it is not yet), a local folder, a hub
    id's cached snapshot, or the cached conversion of `gguf_file`. A model not on this machine yet (a hub
    id not cached, a GGUF not converted yet) is not checked here; `check_pretrain` covers a missing one.
    """
    if not isinstance(stop_strings, list | tuple):
        return []  # the schema reports the wrong type
    where = "actor_infer.generating_args.stop_strings"
    problems = [
        f"{where}[{i}] is an empty string, which would end every response before its first token; remove it"
        for i, text in enumerate(stop_strings)
        if text == ""
    ]
    texts = [text for text in stop_strings if isinstance(text, str) and text]
    folder = _tokenizer_folder(pretrain, gguf_file) if texts else None
    if folder is None:
        return problems
    from transformers import AutoTokenizer

    model = f"pretrain={pretrain!r}" + (f" (gguf_file={gguf_file!r})" if gguf_file else "")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        return [*problems, f"{where}: the tokenizer of {model} did not load from {folder}: {exc}"]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text not in back:
            problems.append(
                f"{where}: {text!r} cannot be produced by the tokenizer of {model}: it encodes to "
                f"{tokenizer.convert_ids_to_tokens(ids)}, which decode to {back!r}, so no response can contain "
                "it; remove it or write it in text this model's tokenizer keeps"
            )
    return problems


def _tokenizer_folder(pretrain: Any, gguf_file: Any) -> Path | None:
    """The local folder whose tokenizer the run will use, or None when it is not on this machine yet."""
    from roll_pipeline.models.hub import hub_cache_dir, is_hub_id

    if not isinstance(pretrain, str):
        return None
    gguf = gguf_file if isinstance(gguf_file, str) and gguf_file else None
    if pretrain.startswith("builtin:"):
        from roll_pipeline.models.cache import resolve_pretrain

        try:
            return Path(resolve_pretrain(pretrain))
        except ValueError:  # an unknown name: check_pretrain reports it
            return None
    if is_hub_id(pretrain):  # only what is cached: preflight downloads nothing
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(pretrain, gguf or "config.json", cache_dir=hub_cache_dir())
        if not isinstance(found, str):
            return None
        return _converted_gguf(Path(found)) if gguf else Path(found).parent
    folder = Path(pretrain).expanduser()
    if gguf:
        source = Path(gguf) if Path(gguf).is_absolute() else folder / gguf
        return _converted_gguf(source) if source.is_file() else None
    return folder if (folder / "config.json").is_file() else None


def _converted_gguf(source: Path) -> Path | None:
    """The cached Hugging Face folder the run converts `source` into (`model_folder`: float32), if it has
    been converted yet."""
    from roll_strategies.models.gguf import GGUF_INFO_FILE, converted_folder

    folder = converted_folder(source)
    return folder if (folder / GGUF_INFO_FILE).is_file() else None


def check_share_prefix(share_prefix: Any, pretrain: Any, gguf_file: Any = None) -> list[str]:
    """A problem if `share_prefix` is on and the model's architecture gives other outputs from a prefix-tree
    forward than from per-row forwards (its attention does not honour a 4D attention mask).

    Preflight loads no weights: a small random instance of the architecture in the folder the run will load
    (`_tokenizer_folder`: its config.json with 2 layers, 2 heads, a 256-token vocabulary) goes through
    `prefix_sharing_supported`, the probe the strategies run on the loaded model, which refuse it at
    construction. A model not on this machine yet, or an architecture that cannot be built small here, is
    left to that refusal."""
    if share_prefix is not True or not isinstance(pretrain, str):
        return []  # off, or the schema reports the wrong type
    folder = _tokenizer_folder(pretrain, gguf_file)
    if folder is None:
        return []
    config = folder / "config.json"
    probed = _probe_architecture(str(folder), config.stat().st_mtime_ns if config.is_file() else 0)
    if probed is None or probed[1]:
        return []
    return [
        f"share_prefix=true: the architecture of pretrain={pretrain!r} ({probed[0]}: {probed[2]}) gives other"
        " log-probs from a prefix-tree forward than from per-row forwards (its attention does not honour the"
        " tree's 4D attention masks, one per attention window), so no role can share prefixes with it; set"
        " share_prefix=false"
    ]


_SMALL_SIZES = {
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "vocab_size": 256,
}


_SMALL_WINDOW = 8


@functools.lru_cache(maxsize=16)
def _probe_architecture(folder: str, mtime_ns: int) -> tuple[str, bool, str] | None:
    """(architecture class, whether it takes a prefix tree, its layers' attention windows) of a small random
    instance of `folder`'s model; None when none can be built here. Cached per folder and config.json
    version (`mtime_ns`). A sliding window shrinks to `_SMALL_WINDOW` tokens: the probe's rows run past
    it in a few tokens, through the same mask code as the real window."""
    import torch
    from roll_strategies.compute.attention_windows import describe_windows
    from roll_strategies.compute.probes import prefix_sharing_supported
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        heads = getattr(config, "num_attention_heads", None) or 1
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        for name, value in _SMALL_SIZES.items():
            if getattr(config, name, None) is not None:
                setattr(config, name, value)
        if getattr(config, "num_key_value_heads", None) is not None:
            config.num_key_value_heads = 1 if kv_heads < heads else 2  # grouped-query attention stays grouped
        config.hidden_size = 2 * head_dim  # the head size stays: rotary settings depend on it
        if isinstance(getattr(config, "sliding_window", None), int):
            config.sliding_window = min(config.sliding_window, _SMALL_WINDOW)
        if isinstance(getattr(config, "layer_types", None), list):
            config.layer_types = config.layer_types[: config.num_hidden_layers]
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if isinstance(getattr(config, name, None), int) and getattr(config, name) >= config.vocab_size:
                setattr(config, name, None)
        with torch.random.fork_rng(devices=[]):  # the random init leaves the caller's generator as it was
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    except Exception:  # an architecture this transformers cannot build small: the strategies still probe
        return None
    return type(model).__name__, prefix_sharing_supported(model), describe_windows(model)
