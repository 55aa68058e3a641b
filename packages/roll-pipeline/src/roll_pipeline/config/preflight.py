"""Checks of a config that its schema cannot make: run by `roll config` and `roll train` before any
worker, model or Ray instance starts, so a bad value fails in a second instead of minutes later.

- each `custom_envs.<tag>.env_type` is a registered env (with the registered list and a did-you-mean);
- each `env_config` validates against that env's own pydantic config (unknown keys are errors);
- `resume_from_checkpoint` exists, is complete and verifies against its manifest;
- `pretrain` is `builtin:NAME` of a known tiny model, or a local model folder;
- each role's `strategy_name` is a registered backend for that role whose extra is installed
  (`roll_pipeline.config.strategies.strategy_problems`).

The checks read the raw composed config (a mapping), so they run even when the schema rejects other
values, and `roll` reports every problem in one error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roll_pipeline.config.schema import AgenticConfig, CustomEnvConfig

__all__ = [
    "check_env_configs",  # env_type registered, env_config valid for that env
    "check_pretrain",  # builtin:NAME or a local model folder
    "check_resume",  # the checkpoint exists and verifies
    "preflight_problems",  # every check above on a raw config mapping
]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_env_configs(custom_envs: Any) -> list[str]:
    """One problem per tag whose `env_type` is not registered or whose `env_config` the env rejects."""
    import roll_envs
    from roll_envs.config import build_config

    if not isinstance(custom_envs, Mapping):
        return []  # the schema reports the wrong type
    problems = []
    for tag, entry in custom_envs.items():
        if not isinstance(entry, Mapping):
            continue
        env_type = entry.get("env_type", CustomEnvConfig.model_fields["env_type"].default)
        env_config = entry.get("env_config") or {}
        where = f"custom_envs.{tag}"
        try:
            spec = roll_envs.spec(env_type)
            model = spec.config_model()
        except roll_envs.RollEnvsError as exc:  # unknown id, or an entry point that does not load
            problems.append(f"{where}.env_type={env_type!r}: {exc}")
            continue
        if model is None or not isinstance(env_config, Mapping):
            continue
        try:
            build_config(model, {**spec.defaults, **env_config}, {}, env_name=spec.id)
        except roll_envs.EnvConfigError as exc:
            problems.append(f"{where}.env_config: {exc}".replace("\n", "\n    "))
    return problems


def check_resume(resume_from_checkpoint: Any) -> list[str]:
    """A problem if `resume_from_checkpoint` is set and does not verify (see `checkpoint.verify_checkpoint`)."""
    from roll_pipeline.state.checkpoint import CheckpointError, verify_checkpoint

    if not resume_from_checkpoint or not isinstance(resume_from_checkpoint, str):
        return []
    if resume_from_checkpoint == "auto":  # the newest that verifies, or none: nothing can be wrong yet
        return []
    try:
        verify_checkpoint(Path(resume_from_checkpoint).expanduser())
    except CheckpointError as exc:
        return [f"resume_from_checkpoint={resume_from_checkpoint!r}: {exc}"]
    return []


def check_pretrain(pretrain: Any, gguf_file: Any = None) -> list[str]:
    """A problem unless `pretrain` is a known `builtin:NAME` or a local folder holding a model."""
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
    path = Path(pretrain).expanduser()
    if path.is_dir():
        needed = gguf_file if isinstance(gguf_file, str) and gguf_file else "config.json"
        if (path / needed).is_file():
            return []
        return [
            f"pretrain={pretrain!r}: the folder has no {needed}; point pretrain at a Hugging Face model folder"
        ]
    fix = "set pretrain to a local model folder (roll loads models from local folders only)"
    if _HUB_ID.match(pretrain):
        cached = _hub_cache_folder(pretrain)
        fix = (
            f"it is in the Hugging Face cache: set pretrain={cached}"
            if cached
            else f"download it first, e.g. `huggingface-cli download {pretrain} --local-dir models/{pretrain}`, "
            f"then set pretrain=models/{pretrain}"
        )
    return [f"pretrain={pretrain!r} is not a folder; {fix}, or use builtin:tiny-frozen-lake"]


def _hub_cache_folder(repo_id: str) -> str | None:
    """The snapshot folder of `repo_id` in the local Hugging Face cache, if its config.json is there."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=os.environ.get("HF_HUB_CACHE"))
    return str(Path(found).parent) if isinstance(found, str) else None


def preflight_problems(data: Mapping[str, Any]) -> list[str]:
    """Every problem the checks above find in a raw config mapping (missing keys take the defaults)."""
    actor_train = data.get("actor_train")
    model_args = actor_train.get("model_args") if isinstance(actor_train, Mapping) else None
    gguf = model_args.get("gguf_file") if isinstance(model_args, Mapping) else None
    from roll_pipeline.config.strategies import strategy_problems

    return [
        *check_env_configs(data.get("custom_envs")),
        *check_resume(data.get("resume_from_checkpoint")),
        *check_pretrain(data.get("pretrain", AgenticConfig.model_fields["pretrain"].default), gguf),
        *strategy_problems(data),
    ]
