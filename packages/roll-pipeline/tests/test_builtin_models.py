"""The builtin tiny models' warm-up data: the default one sees single boards, the history one whole episodes,
the Sokoban one rooms, the multi-env one episodes of FrozenLake and Sokoban in turn."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from roll_pipeline.models import (
    BUILD_VERSION,
    BUILTIN_MODELS,
    HISTORY_WINDOW,
    TINY_FROZEN_LAKE_INSTRUCTION,
    TINY_SOKOBAN_INSTRUCTION,
    format_warmup_examples,
    vocabulary_corpus,
)


def _small(name: str):
    return dataclasses.replace(BUILTIN_MODELS[name], warmup_examples=300)


def test_the_default_model_warms_up_on_single_board_prompts():
    spec = _small("tiny-frozen-lake")
    assert spec.sliding_window is None
    for messages, response in format_warmup_examples(spec):
        assert [m["role"] for m in messages] == ["system", "user"]
        assert response.startswith("<answer>") and response.endswith("</answer>")


def test_the_history_model_warms_up_on_whole_episodes_played_so_far():
    spec = _small("tiny-frozen-lake-history")
    assert spec.sliding_window == HISTORY_WINDOW
    examples = format_warmup_examples(spec)
    lengths = {len(messages) for messages, _ in examples}
    assert 2 in lengths and max(lengths) >= 8  # first turns and deep ones
    for messages, _ in examples:
        roles = [m["role"] for m in messages]
        assert roles[0] == "system" and roles[-1] == "user"
        assert roles[1:] == ["user", "assistant"] * ((len(roles) - 2) // 2) + ["user"]
        # the earlier turns are the episode's own: each assistant turn is an answer
        assert all(m["content"].startswith("<answer>") for m in messages if m["role"] == "assistant")


@pytest.mark.parametrize(
    ("name", "digest"),
    [
        ("tiny-frozen-lake", "7bc53fa55c1379db819b0ee85e4f5705cfc88438babb21f2ee57cf84e6d0abdd"),
        ("tiny-frozen-lake-history", "edc5a68b44d0963fd71ddc0fdfa83b69cc4d04c543c3db3ee75fe36d9a77509d"),
    ],
    ids=["tiny-frozen-lake", "tiny-frozen-lake-history"],
)
def test_the_frozen_lake_models_warm_up_on_the_same_examples_as_before_multi_env_specs(name, digest):
    """Cached models are found by name and BUILD_VERSION only: their warm-up data must not change (these
    digests were taken before `TinyModelSpec.envs` existed); a change needs a new BUILD_VERSION."""
    examples = format_warmup_examples(BUILTIN_MODELS[name])
    assert len(examples) == 4000
    assert hashlib.sha256(json.dumps(examples).encode()).hexdigest() == digest
    assert BUILD_VERSION == 3


def test_the_sokoban_model_warms_up_on_sokoban_rooms_with_the_short_instruction():
    for messages, response in format_warmup_examples(_small("tiny-sokoban")):
        assert messages[0]["content"] == TINY_SOKOBAN_INSTRUCTION
        assert set(messages[1]["content"]) <= set("#_O√XPS\n") and messages[1]["content"].startswith("#")
        assert response in {f"<answer>{a}</answer>" for a in ("Up", "Down", "Left", "Right")}


def test_a_multi_env_model_interleaves_episodes_of_its_envs():
    spec = _small("tiny-agentic")
    assert [w.env_type for w in spec.envs] == ["frozen_lake", "sokoban"]
    examples = format_warmup_examples(spec)
    prompts = [messages[0]["content"] for messages, _ in examples]
    runs = [p for i, p in enumerate(prompts) if i == 0 or p != prompts[i - 1]]  # one entry per episode
    expected = [TINY_FROZEN_LAKE_INSTRUCTION, TINY_SOKOBAN_INSTRUCTION] * len(runs)
    assert runs == expected[: len(runs)] and len(runs) > 50
    share = prompts.count(TINY_SOKOBAN_INSTRUCTION) / len(prompts)
    assert 0.35 < share < 0.65
    for messages, _ in examples:  # each env's boards under its own instruction
        board = messages[1]["content"]
        assert ("#" in board) == (messages[0]["content"] == TINY_SOKOBAN_INSTRUCTION)


def test_the_sokoban_instruction_is_short_for_the_tiny_tokenizer():
    from roll_strategies.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(vocabulary_corpus())
    assert len(tokenizer(TINY_SOKOBAN_INSTRUCTION)["input_ids"]) == 22
    assert len(tokenizer(TINY_FROZEN_LAKE_INSTRUCTION)["input_ids"]) == 18
