"""Fixtures: a real Hugging Face word-level tokenizer with a Qwen-style chat template, built in memory."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = ["Left", "Right", "Up", "Down", "system", "user", "assistant", "go", "you", "are", "on", "a", "lake"]


def hf_tokenizer(vocab: list[str], split: str, decoder: Any, added: Sequence[str] = ()):
    """A word-level HF tokenizer over the chat specials and `vocab`, splitting text into the matches of
    `split`, with CHAT_TEMPLATE; `added`: tokens of `vocab` matched before the split (the answer tags)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<unk>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(split), behavior="isolated")
    tok.decoder = decoder
    tok.add_special_tokens(specials)
    if added:
        tok.add_tokens(list(added))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )


def word_level_tokenizer(words: list[str]):
    """A word-level tokenizer of `words` (plus the chat specials and answer tags) with CHAT_TEMPLATE."""
    from tokenizers import decoders

    tags = ["<answer>", "</answer>"]
    return hf_tokenizer(
        tags + words, r"[A-Z]?[a-z]+|\n|[^\s]", decoders.WordPiece(prefix="##", cleanup=False), tags
    )


@pytest.fixture(scope="session")
def chat_tokenizer():
    return word_level_tokenizer(["\n", "_", "P", "O", "G", "X", "√", ".", ",", ":", *WORDS])


@pytest.fixture(scope="session")
def make_hf_tokenizer():
    """`make_hf_tokenizer(vocab, split, decoder)`: `hf_tokenizer`, for a test module's own tokenizer."""
    return hf_tokenizer


@pytest.fixture(scope="session")
def make_word_tokenizer():
    """`make_word_tokenizer(words)`: a tokenizer built as `chat_tokenizer` is, over other words."""
    return word_level_tokenizer


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """The event a test's hanging env calls wait on (`FaultyEnv(release=...)`), set when the test ends, passed or
    failed, so that no env thread stays blocked past it."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def scheduler_factory(chat_tokenizer):
    """`make(layout, policy, env_factory=..., **scheduler kwargs)` -> an in-process `RolloutScheduler`."""
    from roll_rollout import (
        EnvCallLimits,
        EnvSlotSpec,
        EnvWorker,
        RolloutScheduler,
        SamplingSettings,
        WorkerLink,
    )
    from roll_rollout.testing import countdown_factory

    def make(layout, policy, env_factory=None, limits=None, max_turns=6, **kwargs):
        factory = env_factory or countdown_factory()

        def spawn(w):
            slots = [
                EnvSlotSpec(e, layout.tag_of_group(layout.group_of_env(e)), "countdown", max_turns=max_turns)
                for e in layout.env_ids_of_worker(w)
            ]
            worker = EnvWorker(
                slots, chat_tokenizer, policy, env_factory=factory, limits=limits or EnvCallLimits()
            )
            return WorkerLink.in_process(worker)

        sampling = {tag: SamplingSettings(max_new_tokens=4) for tag in layout.tags}
        return RolloutScheduler(layout, spawn, sampling, **kwargs)

    return make


@pytest.fixture
def answer_ids(chat_tokenizer):
    """Token ids of the scripted answer 'Left'."""
    return chat_tokenizer.encode("Left", add_special_tokens=False)


@pytest.fixture(scope="session")
def char_tokenizer():
    """A character-level tokenizer (printable ASCII, one id a character) with CHAT_TEMPLATE: any text, tool
    calls included, encodes and decodes back as it was."""
    from tokenizers import decoders

    return hf_tokenizer([chr(c) for c in range(32, 127)] + ["\n"], r"[\s\S]", decoders.Fuse())


@pytest.fixture
def play_agent():
    """`play(tokenizer, agent, policy, seed=0, max_turns=4, ...)`: one episode of an `openai_agent` slot over
    four_choice playing `agent` ('path.py:function'); the decoded trajectory."""
    import asyncio

    from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings
    from roll_rollout.testing import play_jobs

    def play(
        tokenizer, agent, policy, seed=0, max_turns=4, max_new_tokens=8, timeout_s=30.0, demonstrate=False
    ):
        config = {"agent": agent, "task_env": "four_choice", "agent_timeout_s": timeout_s}
        spec = EnvSlotSpec(0, "Agent", "openai_agent", config, max_turns=max_turns, max_context_tokens=4096)
        sampling = SamplingSettings(max_new_tokens=max_new_tokens, demonstrate=demonstrate)

        worker = EnvWorker([spec], tokenizer, policy)
        return asyncio.run(play_jobs(worker, [EpisodeJob(0, 7, 9, seed, sampling)], timeout_s=30.0))[0]

    return play
