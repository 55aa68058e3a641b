"""A deterministic byte-level BPE tokenizer for the tiny offline model (no hub, no data set needed).

Why byte-level BPE and not a plain word-level vocabulary: transformers 5 loads every `model_type:
qwen2` folder through `Qwen2Tokenizer`, which rebuilds a byte-level BPE pipeline (NFC, Qwen's split
regex, ByteLevel) from the saved vocab and merges, so only a tokenizer of that shape survives
`AutoTokenizer.from_pretrained`. Within that shape the vocabulary behaves like a word-level one:

- ids 0..7: `<|endoftext|>` (pad), `<unk>`, `<|im_start|>`, `<|im_end|>` (eos), then the added,
  non-special tags `<answer>`, `</answer>`, `<think>`, `</think>` (decode keeps them);
- all 256 byte symbols, so any text encodes (no `<unk>` is ever produced) and decodes exactly,
  newlines and spaces included;
- BPE merges learnt (deterministically) from every word of the shape `[A-Z]?[a-z]+` in the caller's
  texts, with and without a leading space, and from the grid symbols: "Left" and " Left" are one token
  each, while a grid row like "_PGO" stays "_", "P", "G", "O" (no merges join two capitals or digits).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerBase
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "GRID_SYMBOLS",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "TAG_TOKENS",
    "UNK_TOKEN",
    "build_tiny_tokenizer",
    "train_qwen_bpe",
]

PAD_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<unk>"
BOS_CHAT_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, UNK_TOKEN, BOS_CHAT_TOKEN, EOS_TOKEN)
TAG_TOKENS: tuple[str, ...] = ("<answer>", "</answer>", "<think>", "</think>")
GRID_SYMBOLS: tuple[str, ...] = ("√", "■", "□", "●", "○", "·", "█", "░", "▲", "▼", "◀", "▶", "×")
BASE_WORDS: tuple[str, ...] = ("system", "user", "assistant", "answer", "think")
WORD_PATTERN = re.compile(r"[A-Z]?[a-z]+")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_qwen_bpe(
    corpus: Iterable[str], *, vocab_size: int, special_tokens: Sequence[str] = ()
) -> Tokenizer:
    """A byte-level BPE tokenizer with Qwen2's pipeline (NFC, its split regex, ByteLevel: the shape `Qwen2Tokenizer`
    rebuilds from a saved vocabulary and merges) learnt from `corpus`, deterministically; every byte is in its
    alphabet, so no text is out of vocabulary, and min_frequency 1 lets every corpus word merge to one token."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


def _train_bpe(vocab_texts: Iterable[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Learn merges until every corpus word (and grid symbol) is one token; deterministic."""
    words = set(BASE_WORDS)
    for text in vocab_texts:
        words.update(WORD_PATTERN.findall(text))
    corpus = [form for word in sorted(words) for form in (word, " " + word)]
    corpus += [symbol for symbol in GRID_SYMBOLS for _ in range(2)]
    # no vocabulary cap: merge until each word is a single token
    tok = train_qwen_bpe(corpus, vocab_size=1_000_000, special_tokens=[*SPECIAL_TOKENS, *TAG_TOKENS])
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), merges  # type: ignore[return-value]


def build_tiny_tokenizer(
    vocab_texts: Iterable[str], *, model_max_length: int = 2048
) -> PreTrainedTokenizerBase:
    """Build the tokenizer (deterministic: same texts -> same vocabulary, merges and ids).

    Args:
        vocab_texts: texts whose words become single tokens; other text still encodes, byte by byte.
        model_max_length: recorded in tokenizer_config.json.
    Returns:
        A `Qwen2Tokenizer` (eos `<|im_end|>`, pad `<|endoftext|>`, unk `<unk>`, Qwen-style chat
        template); `save_pretrained` it next to a qwen2 config and `AutoTokenizer.from_pretrained`
        loads the same tokenizer back.
    """
    vocab, merges = _train_bpe(vocab_texts)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=UNK_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens([AddedToken(BOS_CHAT_TOKEN, special=True, normalized=False)], special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    # Fill the vocabulary up to a multiple of 8 so len(tokenizer) == the model's (padded) vocab_size and
    # every id the model can sample decodes (as a skipped special token).
    reserved = [f"<|reserved_{i}|>" for i in range(-len(tokenizer) % 8)]
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in reserved], special_tokens=True
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
