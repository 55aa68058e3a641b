from __future__ import annotations

import json
import random
import re

import pytest
import torch
from roll_strategies import StrategyError, build_tiny_model, build_tiny_tokenizer
from roll_strategies.models.tiny_tokenizer import CHAT_TEMPLATE
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_folder_loads_with_auto_classes(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.tie_word_embeddings and model.config.vocab_size % 8 == 0
    assert len(tok) == model.config.vocab_size
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.unk_token == "<unk>"
    info = json.loads((tiny_model_dir / "build_info.json").read_text())
    assert info["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert 100_000 < info["num_parameters"] < 1_000_000


def test_same_seed_same_weights_and_ids(tmp_path, toy):
    texts = [toy.SYSTEM, "Sokoban push the box"]
    a = build_tiny_model(tmp_path / "a", vocab_texts=texts, seed=3)
    b = build_tiny_model(tmp_path / "b", vocab_texts=texts, seed=3)
    c = build_tiny_model(tmp_path / "c", vocab_texts=texts, seed=4)
    wa, wb, wc = (load_file(str(d / "model.safetensors")) for d in (a, b, c))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_tokenizer_round_trip_of_grid_and_answer(tiny_model_dir, toy):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = toy.grid_observation(random.Random(1)) + "\n#√_O\n<answer>Left</answer>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    tokens = tok.convert_ids_to_tokens(ids)
    assert tokens[-3:] == ["<answer>", "Left", "</answer>"]
    assert tok.convert_ids_to_tokens(tok.encode("_PGO", add_special_tokens=False)) == ["_", "P", "G", "O"]
    assert len(tok.encode(" Decide", add_special_tokens=False)) == 1  # corpus words are single tokens
    assert tok.unk_token_id not in tok.encode("Some unseen Wörds 123 ☃", add_special_tokens=False)


def test_chat_template(tiny_model_dir, toy):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(toy.chat("_P"), add_generation_prompt=True, tokenize=False)
    assert text == (
        f"<|im_start|>system\n{toy.SYSTEM}<|im_end|>\n<|im_start|>user\n_P\nDecide your next action."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.chat_template == CHAT_TEMPLATE
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and tok.eos_token_id in ids


def test_vocab_padded_with_reserved_tokens():
    tok = build_tiny_tokenizer(["a few words"])
    assert len(tok) % 8 == 0
    assert tok.decode(list(range(len(tok))), skip_special_tokens=True)  # every id decodes


def test_warmup_teaches_the_answer_format(warm_model_dir, toy):
    tok = AutoTokenizer.from_pretrained(warm_model_dir)
    model = AutoModelForCausalLM.from_pretrained(warm_model_dir).eval()
    info = json.loads((warm_model_dir / "build_info.json").read_text())
    assert info["warmup_steps"] == 80 and info["final_warmup_loss"] < 0.6
    rng = random.Random(123)
    for _ in range(4):
        text = tok.apply_chat_template(
            toy.chat(toy.grid_observation(rng)), add_generation_prompt=True, tokenize=False
        )
        ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        answer = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        match = re.fullmatch(r"<answer>\s*(\w+)\s*</answer>", answer)
        assert match and match.group(1) in toy.DIRECTIONS, answer


def test_a_sliding_window_hides_tokens_beyond_its_reach(tmp_path, toy):
    texts = [toy.SYSTEM, "Sokoban push the box"]
    windowed = build_tiny_model(tmp_path / "w", vocab_texts=texts, seed=3, sliding_window=4)
    full = build_tiny_model(tmp_path / "f", vocab_texts=texts, seed=3)
    assert json.loads((windowed / "build_info.json").read_text())["sliding_window"] == 4
    assert "sliding_window" not in json.loads((full / "build_info.json").read_text())
    ids = torch.randint(5, 200, (1, 20))
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 200 + 5  # only the first token differs
    for folder, reaches_back in ((windowed, False), (full, True)):
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            last = [model(input_ids=x).logits[0, -1] for x in (ids, changed)]
        # 2 layers x a 4-token window: the last position sees at most 7 tokens back, not 19
        assert torch.allclose(last[0], last[1]) != reaches_back, folder.name
    with pytest.raises(StrategyError, match="sliding_window >= 1"):
        build_tiny_model(tmp_path / "bad", vocab_texts=texts, sliding_window=0)
