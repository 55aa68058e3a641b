"""Resolve `pretrain`: a model folder; a Hugging Face hub id, to its snapshot folder in the Hugging Face
cache (`hub.hub_snapshot`: downloaded unless `HF_HUB_OFFLINE=1`); or `builtin:NAME`, built on first use from
its recipe (`recipes.BUILTIN_MODELS`), or copied from the package where it ships built
(`shipped_builds`), into roll's cache (`$ROLL_CACHE_DIR`, default `~/.cache/roll`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from roll_pipeline.models.hub import hub_snapshot, is_hub_id
from roll_pipeline.models.recipes import BUILTIN_MODELS, TinyModelSpec
from roll_pipeline.models.shipped_builds import build_name, install_shipped, shipped_build
from roll_pipeline.models.warmup import format_warmup_examples, perception_warmup_examples, vocabulary_corpus


def cache_dir() -> Path:
    """Root of roll's caches."""
    return Path(os.environ.get("ROLL_CACHE_DIR", Path.home() / ".cache" / "roll"))


def resolve_pretrain(pretrain: str, seed: int = 0, *, gguf_file: str | None = None) -> Path | str:
    """The local folder every role loads: `pretrain` itself, a hub id's snapshot, or a built `builtin:` model.

    Args:
        pretrain: a model folder, `Org/Name` on the Hugging Face hub, or `builtin:NAME`.
        seed: unused (a builtin model's seed is part of its recipe); kept for callers.
        gguf_file: the GGUF file a hub id's repo will be loaded from: only it is downloaded.
    Raises:
        HubModelError: a hub id neither cached nor downloadable; the message names `hf download ID`.
    """
    if is_hub_id(pretrain):
        return hub_snapshot(pretrain, gguf_file=gguf_file)
    if not pretrain.startswith("builtin:"):
        return pretrain
    name = pretrain.removeprefix("builtin:")
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown builtin model {name!r}; available: {sorted(BUILTIN_MODELS)}")
    spec = BUILTIN_MODELS[name]
    target = cache_dir() / "models" / build_name(name, spec)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # flock on POSIX, msvcrt on Windows

    with FileLock(str(target.parent / f".{target.name}.lock")):  # another process may be building it
        if not (target / "config.json").exists():
            shipped = shipped_build(name, spec)
            if shipped is not None:
                print(
                    f"[roll] using the shipped build of {target.name} (cached in {target.parent})", flush=True
                )
                install_shipped(shipped, target)
            else:
                _build(spec, target)
    return target


def _build(spec: TinyModelSpec, target: Path) -> None:
    from roll_strategies.models.tiny_model import build_tiny_model

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"[roll] building the tiny model {target.name} (once; cached in {target.parent})", flush=True)
    build_tiny_model(
        tmp,
        vocab_texts=vocabulary_corpus(),
        warmup_examples=format_warmup_examples(spec) + perception_warmup_examples(spec),
        seed=spec.seed,
        warmup_steps=spec.warmup_steps,
        warmup_lr=spec.warmup_lr,
        sliding_window=spec.sliding_window,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
    )
    tmp.rename(target)
