"""A deterministic word-level tokenizer for the tiny offline model (no hub, no training data needed).

Vocabulary, in id order: special tokens, answer/think tags, the newline, then (sorted) every printable
ASCII character, a few grid symbols, and every piece the pre-tokenizer finds in the caller's texts.
Spaces are dropped when encoding; decoding puts one space between tokens and none around newlines, so
``encode(decode(ids)) == ids`` for any ids without ``<unk>``.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "GRID_SYMBOLS",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "TAG_TOKENS",
    "UNK_TOKEN",
    "build_tiny_tokenizer",
]

PAD_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<unk>"
BOS_CHAT_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, UNK_TOKEN, BOS_CHAT_TOKEN, EOS_TOKEN)
TAG_TOKENS: tuple[str, ...] = ("<answer>", "</answer>", "<think>", "</think>")
GRID_SYMBOLS: tuple[str, ...] = ("√", "■", "□", "●", "○", "·", "█", "░", "▲", "▼", "◀", "▶", "×")
ROLE_WORDS: tuple[str, ...] = ("system", "user", "assistant")

# Chat tokens and tags; words like "Left" / "left"; single digits; newline; any other non-space char.
PIECE_PATTERN = r"<\|[a-z_]+\|>|</?(?:answer|think)>|[A-Z]?[a-z]+|\d|\n|\S"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),  # drop spaces, keep "\n"
            pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated"),
        ]
    )


def _decoder() -> decoders.Decoder:
    # A space before every token except "\n", fused, then no space right after a newline or at the start.
    return decoders.Sequence(
        [
            decoders.Replace(Regex("^(?!\n)"), " "),
            decoders.Fuse(),
            decoders.Replace("\n ", "\n"),
            decoders.Strip(" ", 1, 0),
        ]
    )


def _vocabulary(vocab_texts: Iterable[str]) -> list[str]:
    head = [*SPECIAL_TOKENS, *TAG_TOKENS, "\n"]
    pre = _pre_tokenizer()
    pieces: set[str] = {c for c in string.printable if not c.isspace()} | set(GRID_SYMBOLS) | set(ROLE_WORDS)
    for text in vocab_texts:
        pieces.update(piece for piece, _ in pre.pre_tokenize_str(text))
    return head + sorted(pieces - set(head))


def build_tiny_tokenizer(vocab_texts: Iterable[str], *, model_max_length: int = 2048) -> PreTrainedTokenizerFast:
    """Build the word-level tokenizer (deterministic: same texts -> same vocabulary and ids).

    Args:
        vocab_texts: texts whose words (and symbols) join the vocabulary; words absent here encode as <unk>.
        model_max_length: recorded in tokenizer_config.json.
    Returns:
        A `PreTrainedTokenizerFast` (eos `<|im_end|>`, pad `<|endoftext|>`, unk `<unk>`, Qwen-style chat
        template); `save_pretrained` it and `AutoTokenizer.from_pretrained` loads it back.
    """
    vocab = {token: i for i, token in enumerate(_vocabulary(vocab_texts))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = _decoder()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
