"""The Qwen2.5-0.5B-shaped model: the published architecture (parameter count), a Qwen-style tokenizer that
round-trips text, and Qwen2.5's ChatML, in a folder that `Auto*.from_pretrained` loads back unchanged."""

from __future__ import annotations

import pytest
import torch
from roll_strategies import build_qwen_shaped_model, build_qwen_style_tokenizer
from roll_strategies.models.qwen_shaped import QWEN25_05B_PARAMETERS, qwen_shaped_config

CORPUS = [
    "You are solving the FrozenLake puzzle. Answer with <answer>Direction</answer>.",
    "_P_G\n_O__\n____\n__O_\nDecide your next action.",
    "Left Right Up Down",
]
TEXTS = [
    "Hello world!",
    "_P_G\n_O__\n\n  spaces  and\ttabs ",
    "<answer>Left</answer>",
    "naïve café, 東京, emoji 🧊, numbers 12345",
    "<|im_start|>user\nhi<|im_end|>\n",
]


def test_the_full_size_config_has_qwen2_5_0_5b_s_494m_parameters():
    from transformers import Qwen2ForCausalLM

    config = qwen_shaped_config(eos_token_id=2, pad_token_id=0)
    # The published count, by hand: embedding (tied with the LM head) + 24 decoder layers + the final norm.
    per_layer = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert QWEN25_05B_PARAMETERS == 151936 * 896 + 24 * per_layer + 896 == 494_032_768
    with torch.device("meta"):  # shapes only: nothing allocated
        model = Qwen2ForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == QWEN25_05B_PARAMETERS
    assert model.lm_head.weight is model.model.embed_tokens.weight
    attention = model.model.layers[0].self_attn
    assert (config.num_attention_heads, config.num_key_value_heads, attention.head_dim) == (14, 2, 64)
    assert config.rope_parameters["rope_theta"] == 1_000_000.0


def test_fewer_layers_keep_the_width_and_vocabulary():
    config = qwen_shaped_config(num_layers=2, eos_token_id=2, pad_token_id=0)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 896, 151936)
    with pytest.raises(ValueError, match="num_layers"):
        qwen_shaped_config(num_layers=25, eos_token_id=2, pad_token_id=0)


def test_the_tokenizer_round_trips_and_places_the_special_tokens_after_the_vocabulary():
    tokenizer = build_qwen_style_tokenizer(CORPUS)
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    n = len(tokenizer)
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
        n - 3,
        n - 2,
        n - 1,
    ]
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == (
        "<|im_end|>",
        "<|endoftext|>",
        None,
    )
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [n - 2]
    # corpus words (with their leading space) merge to one token each
    assert tokenizer.tokenize("Decide your next action.") == ["Decide", "Ġyour", "Ġnext", "Ġaction", "."]
    assert build_qwen_style_tokenizer(CORPUS).get_vocab() == tokenizer.get_vocab()  # deterministic


def test_the_chat_template_renders_qwen2_5_chatml():
    tokenizer = build_qwen_style_tokenizer(CORPUS)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Move?"}]
    rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert (
        rendered
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nMove?<|im_end|>\n<|im_start|>assistant\n"
    )
    with_answer = [*chat, {"role": "assistant", "content": "<answer>Up</answer>"}]
    assert tokenizer.apply_chat_template(with_answer, tokenize=False) == (
        rendered + "<answer>Up</answer><|im_end|>\n"
    )
    no_system = tokenizer.apply_chat_template(chat[1:], add_generation_prompt=False, tokenize=False)
    assert no_system == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nMove?<|im_end|>\n"
    )


@pytest.mark.slow
def test_the_folder_loads_back_with_auto_classes(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_qwen_shaped_model(tmp_path / "qwen", corpus=CORPUS, num_layers=1)
    built = build_qwen_style_tokenizer(CORPUS)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:  # transformers rebuilds a qwen2 folder's tokenizer from vocab + merges: same ids
        assert tokenizer.encode(text, add_special_tokens=False) == built.encode(
            text, add_special_tokens=False
        )
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.chat_template == built.chat_template
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.dtype == torch.bfloat16
    assert (model.config.eos_token_id, model.config.pad_token_id) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    one_layer = QWEN25_05B_PARAMETERS - 23 * 14_912_384
    assert sum(p.numel() for p in model.parameters()) == one_layer
    ids = torch.tensor([tokenizer.encode("<answer>Left</answer>")])
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], 151936)
