"""Fixtures: a real Hugging Face word-level tokenizer with a Qwen-style chat template, built in memory."""

from __future__ import annotations

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = ["Left", "Right", "Up", "Down", "system", "user", "assistant", "go", "you", "are", "on", "a", "lake"]


@pytest.fixture(scope="session")
def chat_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<unk>", "<|im_start|>", "<|im_end|>"]
    tags = ["<answer>", "</answer>"]
    chars = ["\n", "_", "P", "O", "G", "X", "√", ".", ",", ":"]
    vocab = {tok: i for i, tok in enumerate(specials + tags + chars + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[A-Z]?[a-z]+|\n|[^\s]"), behavior="isolated")
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(specials)
    tok.add_tokens(tags)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )
