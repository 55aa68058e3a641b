"""The default config's model ships built: a first run copies it instead of warming up for minutes, and only
while the shipped build matches the current recipe."""

from __future__ import annotations

import dataclasses
import json

import pytest
from roll_pipeline.config.tiny_recipe import TINY_MODEL
from roll_pipeline.models import cache
from roll_pipeline.models.recipes import BUILTIN_MODELS
from roll_pipeline.models.shipped_builds import FINGERPRINT_FILE, SHIPPED_DIR, build_name, recipe_fingerprint

DEFAULT_NAME = TINY_MODEL.removeprefix("builtin:")


def _shipped_folder():
    return SHIPPED_DIR / build_name(DEFAULT_NAME, BUILTIN_MODELS[DEFAULT_NAME])


def test_the_default_model_ships_built_for_its_current_recipe():
    folder = _shipped_folder()
    assert (folder / "model.safetensors").is_file(), f"no shipped build at {folder}"
    stamp = (folder / FINGERPRINT_FILE).read_text().strip()
    assert stamp == recipe_fingerprint(BUILTIN_MODELS[DEFAULT_NAME]), (
        "The recipe, warm-up data or builder of the shipped default model changed; rebuild and re-ship it with "
        f"`uv run python tools/ship_builtin_model.py {DEFAULT_NAME}`."
    )
    info = json.loads((folder / "build_info.json").read_text())
    spec = BUILTIN_MODELS[DEFAULT_NAME]
    assert (info["warmup_steps"], info["num_heads"], info["seed"]) == (
        spec.warmup_steps,
        spec.num_heads,
        spec.seed,
    )


def test_any_change_to_the_recipe_changes_its_fingerprint():
    spec = BUILTIN_MODELS[DEFAULT_NAME]
    assert recipe_fingerprint(dataclasses.replace(spec, warmup_lr=spec.warmup_lr * 2)) != recipe_fingerprint(
        spec
    )
    assert recipe_fingerprint(dataclasses.replace(spec, warmup_examples=300)) != recipe_fingerprint(spec)


def test_a_first_run_copies_the_shipped_build_and_loads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ROLL_BUILD_BUILTIN", raising=False)
    monkeypatch.setattr(
        cache, "_build", lambda spec, target: pytest.fail("built instead of using the shipped build")
    )
    folder = cache.resolve_pretrain(TINY_MODEL)
    assert (folder / "model.safetensors").read_bytes() == (
        _shipped_folder() / "model.safetensors"
    ).read_bytes()
    assert not (folder / FINGERPRINT_FILE).exists()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.num_parameters() == json.loads((folder / "build_info.json").read_text())["num_parameters"]
    assert tokenizer.eos_token_id is not None


def test_a_stale_shipped_build_or_the_opt_out_builds_locally(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(
        cache, "_build", lambda spec, target: built.append(target) or target.mkdir(parents=True)
    )
    monkeypatch.setenv("ROLL_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("ROLL_BUILD_BUILTIN", "1")
    cache.resolve_pretrain(TINY_MODEL)
    monkeypatch.delenv("ROLL_BUILD_BUILTIN")
    monkeypatch.setenv("ROLL_CACHE_DIR", str(tmp_path / "b"))
    stale = dataclasses.replace(BUILTIN_MODELS[DEFAULT_NAME], warmup_lr=1e-3)
    monkeypatch.setitem(BUILTIN_MODELS, DEFAULT_NAME, stale)
    cache.resolve_pretrain(TINY_MODEL)
    assert len(built) == 2
