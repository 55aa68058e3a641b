"""`roll config` checks stop strings against the model's own tokenizer before any worker starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline.models import model_checks
from roll_pipeline.models.hub import add_to_hub_cache
from roll_pipeline.preflight import check_stop_strings, preflight_problems
from roll_strategies.models.gguf import SMOLLM2_GGUF, find_smollm2_gguf
from transformers import PreTrainedTokenizerFast


@pytest.fixture(scope="module")
def word_level_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder whose tokenizer knows a few words only: anything else encodes to <unk>."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, "Left": 2, "Right": 3, "answer": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path_factory.mktemp("wordlevel") / "model"
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(
        folder
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": len(vocab)}))
    return folder


@pytest.fixture
def loads(monkeypatch) -> list[Path]:
    """The folders preflight loads a tokenizer from, in order."""
    from transformers import AutoTokenizer

    seen: list[Path] = []
    real = AutoTokenizer.from_pretrained

    def spy(folder, *args, **kwargs):
        seen.append(Path(folder))
        return real(folder, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", spy)
    return seen


def test_builtin_model_accepts_tags_and_multi_token_strings(loads):
    assert check_stop_strings(["</answer>", "Left Right", "\n\n"], "builtin:tiny-frozen-lake") == []
    assert len(loads) == 1  # the built model's tokenizer, once


def test_empty_stop_string_is_an_error_without_loading_anything(loads):
    (problem,) = check_stop_strings([""], "builtin:tiny-frozen-lake")
    assert "stop_strings[0] is an empty string" in problem and "remove it" in problem
    assert loads == []


def test_unproducible_string_names_the_string_and_the_model(word_level_folder):
    problems = check_stop_strings(["Left", "</answer>", "", "Right answer"], str(word_level_folder))
    assert len(problems) == 2
    assert "stop_strings[2] is an empty string" in problems[0]
    assert "'</answer>' cannot be produced" in problems[1] and str(word_level_folder) in problems[1]
    assert "<unk>" in problems[1]


def test_gguf_model_is_checked_once_converted_and_skipped_before(tmp_path, loads):
    fake = tmp_path / "gguf"
    fake.mkdir()
    (fake / "m.gguf").write_bytes(b"GGUF not converted yet" * 10)
    assert check_stop_strings(["</answer>"], str(fake), "m.gguf") == [] and loads == []
    source = find_smollm2_gguf()
    if source is None or model_checks._converted_gguf(source) is None:
        pytest.skip("SmolLM2 not converted (uv run python tools/convert_gguf.py --fetch-smollm2)")
    # "</answer>" is three SmolLM2 tokens: a valid stop string now
    assert check_stop_strings(["</answer>"], str(source.parent), SMOLLM2_GGUF) == []
    assert loads == [model_checks._converted_gguf(source)]


def test_hub_ids_are_checked_from_the_cache_only(word_level_folder, tmp_path, monkeypatch, loads):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_stop_strings(["</answer>"], "Org/NotCached") == [] and loads == []
    add_to_hub_cache(word_level_folder, "Org/Words")
    (problem,) = check_stop_strings(["</answer>"], "Org/Words")
    assert "'</answer>' cannot be produced" in problem and "Org/Words" in problem


def test_preflight_reads_the_sampling_role_and_the_schema_default(word_level_folder):
    config = {"pretrain": str(word_level_folder), "actor_infer": {"generating_args": {"stop_strings": [""]}}}
    assert sum("stop_strings" in p for p in preflight_problems(config)) == 1
    del config["actor_infer"]  # the schema's default stop strings, "</answer>" among them
    assert any("'</answer>' cannot be produced" in p for p in preflight_problems(config))
