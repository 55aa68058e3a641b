"""Shared fixtures: one tiny model folder (random init), one format-warmed folder and one random Llama-shaped
folder per test session; the toy prompt helpers; right-padded prompt + response rows; the check that two
generations agree."""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from roll_strategies import GenerationOutput, build_tiny_model
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

# the rank scripts and shared row builders beside the tests (prefix_ranks, dp_ranks) import as modules
sys.path.insert(0, str(Path(__file__).resolve().parent))

DIRECTIONS = ("Left", "Right", "Up", "Down")
SYSTEM = "You are solving the FrozenLake puzzle. Answer with <answer>Direction</answer>."


def grid_observation(rng: random.Random, size: int = 4) -> str:
    return "\n".join("".join(rng.choice("_PGO") for _ in range(size)) for _ in range(size))


def chat(observation: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{observation}\nDecide your next action."},
    ]


def warmup_examples(n: int, seed: int = 0) -> list[tuple[list[dict[str, str]], str]]:
    rng = random.Random(seed)
    return [(chat(grid_observation(rng)), f"<answer>{rng.choice(DIRECTIONS)}</answer>") for _ in range(n)]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model",
        vocab_texts=[SYSTEM, "Decide your next action.", " ".join(DIRECTIONS)],
    )


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("warm") / "model",
        vocab_texts=[SYSTEM],
        warmup_examples=warmup_examples(128),
        warmup_steps=80,
        warmup_batch_size=32,
    )


@pytest.fixture(scope="session")
def llama_model_dir(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Llama-shaped model on the tiny model's tokenizer."""
    out = tmp_path_factory.mktemp("llama") / "model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = LlamaConfig(
        vocab_size=8 * -(-len(tokenizer) // 8),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).float().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def toy() -> SimpleNamespace:
    """The toy FrozenLake-like prompt helpers (tests run in importlib mode, so conftest is not importable)."""
    return SimpleNamespace(
        DIRECTIONS=DIRECTIONS,
        SYSTEM=SYSTEM,
        chat=chat,
        grid_observation=grid_observation,
        warmup_examples=warmup_examples,
    )


def padded_rows(lengths: Sequence[tuple[int, int]], seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded rows of random ids, one per (prompt, response) length pair, with their attention and
    response masks."""
    gen = torch.Generator().manual_seed(seed)
    width = max(p + q for p, q in lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    resp = torch.zeros_like(ids, dtype=torch.bool)
    for r, (p, q) in enumerate(lengths):
        ids[r, : p + q] = torch.randint(8, 200, (p + q,), generator=gen)
        mask[r, : p + q] = 1
        resp[r, p : p + q] = True
    return {"input_ids": ids, "attention_mask": mask, "response_mask": resp}


@pytest.fixture(scope="session")
def prompt_rows():
    """`padded_rows` for the tests (conftest is not importable in importlib mode)."""
    return padded_rows


def assert_same_generations(plain: list[GenerationOutput], shared: list[GenerationOutput]) -> None:
    """The same tokens and finish reasons row for row, log-probs within 1e-5."""
    for a, b in zip(plain, shared, strict=True):
        assert a.output_ids == b.output_ids and a.finish_reason == b.finish_reason
        np.testing.assert_allclose(b.log_probs, a.log_probs, atol=1e-5, rtol=0)


@pytest.fixture(scope="session")
def assert_same():
    """`assert_same_generations` for the tests (conftest is not importable in importlib mode)."""
    return assert_same_generations
