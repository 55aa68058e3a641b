"""Build the project's tiny offline causal LM (Qwen2 architecture) and its tokenizer, deterministically.

No model hub is reachable in this project, so the embedded configs train a model this module builds:
a word-level tokenizer (`tiny_tokenizer`), a seeded `Qwen2ForCausalLM` of a few hundred thousand
parameters, and optionally a short supervised warm-up that teaches the answer *format* only. The
folder it writes loads with `AutoTokenizer` / `AutoModelForCausalLM.from_pretrained`, the same code
path as a hub model.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from roll_strategies.errors import StrategyError
from roll_strategies.models.tiny_tokenizer import build_tiny_tokenizer

__all__ = ["TINY_MODEL_FORMAT_VERSION", "WarmupExample", "build_tiny_model", "encode_chat_example"]

WarmupExample = tuple[list[dict[str, str]], str]
"""(chat messages, assistant response text): the response (+ eos) is the supervised target."""

IGNORE_INDEX = -100

TINY_MODEL_FORMAT_VERSION = 2
"""Bumped whenever the same arguments would build a different folder (2: byte-level BPE tokenizer); key caches on it."""


def encode_chat_example(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], response: str
) -> tuple[list[int], list[int]]:
    """Token ids of one chat example: (prompt ids incl. the generation prompt, response ids + eos)."""
    prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
    target = [*tokenizer.encode(response, add_special_tokens=False), tokenizer.eos_token_id]
    return prompt, target


def _make_config(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
    tie_word_embeddings: bool,
    sliding_window: int | None = None,
) -> Qwen2Config:
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise StrategyError(
            f"Expected hidden_size divisible by num_heads and num_heads by num_kv_heads, got "
            f"hidden_size={hidden_size}, num_heads={num_heads}, num_kv_heads={num_kv_heads}; pick e.g. 128/4/2."
        )
    if sliding_window is not None and sliding_window < 1:
        raise StrategyError(
            f"Expected sliding_window >= 1 token (or None for full attention), got {sliding_window}."
        )
    window = {} if sliding_window is None else {"sliding_window": sliding_window, "max_window_layers": 0}
    return Qwen2Config(
        vocab_size=8 * math.ceil(len(tokenizer) / 8),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=tie_word_embeddings,
        use_sliding_window=sliding_window is not None,
        **window,  # max_window_layers=0: every layer slides
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        architectures=["Qwen2ForCausalLM"],
    )


def _collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(p) + len(r) for p, r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (prompt, response) in enumerate(batch):
        seq = prompt + response
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(prompt) : len(seq)] = torch.tensor(response)
        mask[row, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _response_loss(model: Qwen2ForCausalLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled positions; the LM head runs on those positions only."""
    hidden = model.model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
    ).last_hidden_state
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE_INDEX
    logits = model.lm_head(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep])


def _warmup(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[WarmupExample],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> float:
    """Supervised format warm-up: loss on response tokens (+ eos) only; returns the last-50-step mean loss."""
    encoded = [encode_chat_example(tokenizer, messages, response) for messages, response in examples]
    gen = torch.Generator().manual_seed(seed + 1)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    model.train()
    recent: list[float] = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        idx = torch.randint(len(encoded), (batch_size,), generator=gen).tolist()
        loss = _response_loss(model, _collate([encoded[i] for i in idx], tokenizer.pad_token_id))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        recent = [*recent[-49:], loss.item()]
        if step % 50 == 0 or step == steps:
            print(
                f"[tiny-model warm-up] step {step}/{steps} loss {sum(recent) / len(recent):.4f} "
                f"({time.perf_counter() - start:.1f}s)",
                flush=True,
            )
    model.eval()
    return sum(recent) / max(len(recent), 1)


def build_tiny_model(
    out_dir: Path,
    *,
    vocab_texts: list[str],
    warmup_examples: Sequence[WarmupExample] = (),
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    tie_word_embeddings: bool = True,
    sliding_window: int | None = None,
    warmup_steps: int = 300,
    warmup_batch_size: int = 64,
    warmup_lr: float = 3e-3,
    num_threads: int | None = 1,
) -> Path:
    """Build tokenizer + seeded Qwen2 model (+ optional format warm-up) into `out_dir`; return `out_dir`.

    Args:
        out_dir: folder to write (created; existing files of the same names are overwritten).
        vocab_texts: texts whose words join the vocabulary (the warm-up texts are added automatically).
        warmup_examples: (chat messages, response text) pairs; empty -> no warm-up (random init only).
        seed: seeds the weight init and the warm-up batch sampling; same seed -> same folder contents.
        tie_word_embeddings: share the input embedding and the LM head (the Qwen2 small-model default).
        sliding_window: every layer attends to at most this many previous tokens (Qwen2's sliding-window
            attention); None: full attention. A window of about one turn lets a model this small read the
            latest observation of a prompt that keeps the whole history (docs/tiny_model_findings.md).
        num_threads: torch CPU threads during the build (restored afterwards); None keeps the current
            setting. 1 is the default because this model is too small to gain from more, and on a
            shared 2-core machine two threads competing with other jobs ran 4-8x slower.
    Writes:
        config.json, generation_config.json, model.safetensors, tokenizer files, build_info.json.
    """
    sizes = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "tie_word_embeddings": tie_word_embeddings,
    }
    if sliding_window is not None:
        sizes["sliding_window"] = (
            sliding_window  # absent otherwise: a config without it builds byte-identically
        )
    warmup = {"warmup_steps": warmup_steps, "warmup_batch_size": warmup_batch_size, "warmup_lr": warmup_lr}
    previous_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _build(Path(out_dir), vocab_texts, warmup_examples, seed, sizes, warmup)
    finally:
        torch.set_num_threads(previous_threads)


def _build(
    out_dir: Path,
    vocab_texts: list[str],
    warmup_examples: Sequence[WarmupExample],
    seed: int,
    sizes: dict[str, Any],
    warmup: dict[str, float],
) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = list(vocab_texts)
    for messages, response in warmup_examples:
        texts.extend(m["content"] for m in messages)
        texts.append(response)
    tokenizer = build_tiny_tokenizer(texts)
    config = _make_config(tokenizer, **sizes)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).float().eval()
    started = time.perf_counter()
    final_loss = None
    if warmup_examples and warmup["warmup_steps"] > 0:
        final_loss = _warmup(
            model,
            tokenizer,
            warmup_examples,
            steps=int(warmup["warmup_steps"]),
            batch_size=int(warmup["warmup_batch_size"]),
            lr=warmup["warmup_lr"],
            seed=seed,
        )
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    info = {
        "format_version": TINY_MODEL_FORMAT_VERSION,
        "seed": seed,
        "vocab_size": len(tokenizer),
        "padded_vocab_size": config.vocab_size,
        **sizes,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "warmup_examples": len(warmup_examples),
        **warmup,
        "warmup_steps": warmup["warmup_steps"] if final_loss is not None else 0,
        "final_warmup_loss": final_loss,
        "num_threads": torch.get_num_threads(),
        "warmup_seconds": round(time.perf_counter() - started, 2) if final_loss is not None else 0.0,
    }
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return out_dir
