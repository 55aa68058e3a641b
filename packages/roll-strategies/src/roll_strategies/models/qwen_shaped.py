"""A model folder shaped like Qwen2.5-0.5B-Instruct, built offline: its architecture with random weights, and
a Qwen-style byte-level BPE tokenizer with ChatML, for running real-model configs where the hub is unreachable.

What matches the published checkpoint: `Qwen2ForCausalLM` with its config (hidden 896, 24 layers, 14 query
and 2 key/value heads, MLP 4864, vocabulary 151936, tied embeddings, rope theta 1e6, RMS eps 1e-6; 494,032,768
parameters), bf16 weights, Qwen's pre-tokenisation (NFC, its split regex, byte level) and special tokens
`<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos) placed after the BPE vocabulary as in Qwen's, and
Qwen2.5's chat template without tools (a default system turn when the chat has none).

What does not: the weights are random (the model says nothing sensible), and the BPE vocabulary is learnt from
the caller's corpus (a few thousand tokens, not 151,643): ids from there up to 151936 decode to nothing, as
Qwen's own ids past its 151,665 tokens do. `num_layers` may be lowered to make tests fast while keeping the
width and the vocabulary (and so the memory of the embedding, LM head and log-probs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "QWEN25_05B_CONFIG",
    "QWEN25_05B_PARAMETERS",
    "QWEN_CHAT_TEMPLATE",
    "build_qwen_shaped_model",
    "build_qwen_style_tokenizer",
    "qwen_shaped_config",
]

QWEN25_05B_CONFIG: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": 32768,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "attention_dropout": 0.0,
}
"""Qwen2.5-0.5B(-Instruct)'s config.json, less the token ids (those of the tokenizer built here)."""

QWEN25_05B_PARAMETERS = 494_032_768
"""Parameters of Qwen2.5-0.5B: embedding 151936*896 (tied with the LM head) + 24 layers of 14,912,384 + 896."""

PAD_TOKEN, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- set rest = messages[1:] %}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- set rest = messages %}"
    "{%- endif %}"
    "{%- for message in rest %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's ChatML template without the tool branches: system (or Qwen's default system), user and assistant
turns as `<|im_start|>role\\ncontent<|im_end|>\\n`, then `<|im_start|>assistant\\n` for a generation prompt."""

# A little general English so that words outside the caller's corpus still merge into common pieces.
_BASE_CORPUS = (
    "You are a helpful assistant. Think step by step, then give your answer.",
    "The quick brown fox jumps over the lazy dog. What is the capital of France? Paris is.",
    "Answer with <answer>...</answer>. <think>Let me think about the board first.</think>",
    "system user assistant\n",
)


def qwen_shaped_config(
    *, num_layers: int = 24, bos_token_id: int | None = None, eos_token_id: int, pad_token_id: int
) -> Any:
    """Qwen2.5-0.5B's `Qwen2Config` with `num_layers` decoder layers and the given token ids."""
    from transformers import Qwen2Config

    if not 1 <= num_layers <= QWEN25_05B_CONFIG["num_hidden_layers"]:
        raise ValueError(f"Expected 1 <= num_layers <= 24 (Qwen2.5-0.5B has 24), got {num_layers}.")
    values = {**QWEN25_05B_CONFIG, "num_hidden_layers": num_layers}
    values["max_window_layers"] = min(values["max_window_layers"], num_layers)
    return Qwen2Config(
        **values,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        architectures=["Qwen2ForCausalLM"],
    )


def build_qwen_style_tokenizer(corpus: Iterable[str], *, vocab_size: int = 8192) -> Any:
    """A byte-level BPE tokenizer in Qwen's style, learnt from `corpus` (deterministic for the same texts).

    Args:
        corpus: texts the merges are learnt from (plus a short built-in English sample); any text encodes.
        vocab_size: the most BPE tokens (fewer when the corpus has fewer pairs); the 3 special tokens follow.
    Returns:
        A `PreTrainedTokenizerFast` with eos `<|im_end|>`, pad `<|endoftext|>`, no bos, Qwen2.5's chat template.
    """
    from tokenizers import AddedToken, decoders
    from transformers import PreTrainedTokenizerFast

    from roll_strategies.models.tiny_tokenizer import train_qwen_bpe

    tok = train_qwen_bpe([*_BASE_CORPUS, *corpus], vocab_size=vocab_size)
    tok.decoder = decoders.ByteLevel()
    # After the BPE vocabulary, in Qwen's order (151643, 151644, 151645 in Qwen's own tokenizer).
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (PAD_TOKEN, IM_START, IM_END)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        model_max_length=QWEN25_05B_CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
        chat_template=QWEN_CHAT_TEMPLATE,
    )


def build_qwen_shaped_model(
    folder: str | Path,
    *,
    corpus: Iterable[str] = (),
    num_layers: int = 24,
    seed: int = 0,
    dtype: str = "bfloat16",
    tokenizer_vocab_size: int = 8192,
) -> Path:
    """Write a Qwen2.5-0.5B-Instruct-shaped model folder (random weights) that `from_pretrained` loads.

    Args:
        folder: created if missing; config.json, generation_config.json, model.safetensors, tokenizer files.
        corpus: texts the tokenizer's merges are learnt from (e.g. the env's instruction and observations).
        num_layers: decoder layers (24 is the real depth; fewer keep the width and vocabulary, run faster).
        seed: seeds the weight initialisation (Qwen2's: normal, std 0.02).
        dtype: of the saved weights; bfloat16 as the published checkpoint.
        tokenizer_vocab_size: the most BPE tokens of the tokenizer.
    Returns:
        `folder`.
    """
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    from roll_strategies.models._loading import resolve_dtype

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_qwen_style_tokenizer(corpus, vocab_size=tokenizer_vocab_size)
    pad, eos = tokenizer.convert_tokens_to_ids([PAD_TOKEN, IM_END])
    config = qwen_shaped_config(num_layers=num_layers, bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(resolve_dtype(dtype)).eval()
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    info = {
        "shape": "Qwen2.5-0.5B-Instruct",
        "num_layers": num_layers,
        "seed": seed,
        "dtype": dtype,
        "tokenizer_tokens": len(tokenizer),
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }
    (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return out
