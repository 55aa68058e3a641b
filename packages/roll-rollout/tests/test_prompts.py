"""Token-in/token-out: prompts are built from sampled ids, never re-tokenised text."""

from __future__ import annotations

import pytest
from roll_rollout import PromptBuilder

INSTRUCTION = "you are on a lake"


def reference_ids(tok, instruction, observations, responses_text):
    """Independent reference: render the whole conversation as text, tokenise once."""
    messages = [{"role": "system", "content": instruction}]
    for k, obs in enumerate(observations):
        messages.append({"role": "user", "content": obs})
        if k < len(responses_text):
            messages.append({"role": "assistant", "content": responses_text[k]})
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


OBSERVATIONS = ["_P", "P_", "O_"]
ANSWERS = ["<answer>Left</answer>", "<answer>Up</answer>"]


def sampled_ids(tok, texts):
    """The ids a policy sampled for each of `texts`: its tokens, then the eos that stopped it."""
    return [[*tok.encode(t, add_special_tokens=False), tok.eos_token_id] for t in texts]


def test_full_history_equals_tokenising_the_whole_conversation(chat_tokenizer):
    tok = chat_tokenizer
    builder = PromptBuilder(tok, INSTRUCTION, max_history_turns=None)
    observations = ["_P\nOG", "__\nPG", "__\n_√"]
    texts = ["<answer>Down</answer>", "<answer>Right</answer>"]
    responses = sampled_ids(tok, texts)
    got = builder.prompt(observations, responses)
    assert got == reference_ids(tok, INSTRUCTION, observations, texts)


def test_sampled_ids_are_kept_even_when_retokenising_would_differ(chat_tokenizer):
    tok = chat_tokenizer
    builder = PromptBuilder(tok, INSTRUCTION, max_history_turns=None)
    unk = tok.unk_token_id
    weird = [unk, tok.convert_tokens_to_ids("Left"), unk]  # no eos: stopped by length
    ids = builder.prompt(["_P", "P_"], [weird])
    first = builder.first_prompt("_P")
    assert ids[: len(first)] == first
    assert ids[len(first) : len(first) + 3] == weird


@pytest.mark.parametrize("window", [0, 1])
def test_history_window(chat_tokenizer, window):
    builder = PromptBuilder(chat_tokenizer, INSTRUCTION, max_history_turns=window)
    got = builder.prompt(OBSERVATIONS, sampled_ids(chat_tokenizer, ANSWERS))
    kept = OBSERVATIONS[len(OBSERVATIONS) - 1 - window :]
    assert got == reference_ids(chat_tokenizer, INSTRUCTION, kept, ANSWERS[len(ANSWERS) - window :])


def test_bad_arguments(chat_tokenizer):
    with pytest.raises(ValueError):
        PromptBuilder(chat_tokenizer, "", max_history_turns=-1)
    with pytest.raises(ValueError, match="len"):
        PromptBuilder(chat_tokenizer, "").prompt(["a"], [[1]])


def test_the_cache_is_exact_and_bounded(chat_tokenizer):
    import random

    rng = random.Random(0)
    words = ["Left", "Right", "Up", "Down", "go", "lake"]
    eos = chat_tokenizer.eos_token_id
    cached = PromptBuilder(chat_tokenizer, "you are on a lake", max_history_turns=2, cache_size=8)
    reference = PromptBuilder(chat_tokenizer, "you are on a lake", max_history_turns=2, cache_size=0)
    for _ in range(200):
        turns = rng.randint(0, 4)
        observations = [" ".join(rng.choices(words, k=3)) for _ in range(turns + 1)]
        responses = [
            [
                *chat_tokenizer.encode(rng.choice(words), add_special_tokens=False),
                *([eos] if rng.random() < 0.5 else []),
            ]
            for _ in range(turns)
        ]
        assert cached.prompt(observations, responses) == reference.prompt(observations, responses)
    assert len(cached._first._items) <= 8 and len(cached._glue._items) <= 8
    assert len(reference._first._items) == 0


@pytest.mark.parametrize("window", [None, 0, 1])
def test_chat_messages_render_to_the_same_prompt(chat_tokenizer, window):
    """What a text-in chat API receives is the prompt a token-in server receives (same window)."""
    tok = chat_tokenizer
    builder = PromptBuilder(tok, INSTRUCTION, max_history_turns=window)
    messages = builder.messages(OBSERVATIONS, ANSWERS)
    rendered = tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    prompt = builder.prompt(OBSERVATIONS, sampled_ids(tok, ANSWERS))
    assert tok.encode(rendered, add_special_tokens=False) == prompt
    assert messages[0] == {"role": "system", "content": INSTRUCTION}
    with pytest.raises(ValueError, match="len"):
        builder.messages(OBSERVATIONS, ANSWERS[:1])


def test_a_response_prefix_ends_every_generation_prompt_and_is_read_by_the_env(chat_tokenizer):
    """Reference: the whole conversation rendered as text (each assistant turn is prefix + sampled text),
    plus the prefix after the last generation prompt, tokenised once."""
    tok = chat_tokenizer
    builder = PromptBuilder(tok, INSTRUCTION, max_history_turns=None, response_prefix="<answer>")
    observations = ["_P\nOG", "__\nPG", "__\n_√"]
    sampled = ["Down</answer>", "Right</answer>"]
    responses = sampled_ids(tok, sampled)
    full = [builder.full_response(t) for t in sampled]
    assert full == ["<answer>Down</answer>", "<answer>Right</answer>"]
    messages = [{"role": "system", "content": INSTRUCTION}]
    for obs, text in zip(observations, [*full, None], strict=True):
        messages.append({"role": "user", "content": obs})
        if text is not None:
            messages.append({"role": "assistant", "content": text})
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + "<answer>"
    assert builder.prompt(observations, responses) == tok.encode(text, add_special_tokens=False)
    assert builder.first_prompt("_P")[-1] == tok.convert_tokens_to_ids("<answer>")


def test_no_prefix_changes_nothing_and_a_chat_policy_refuses_a_prefix(chat_tokenizer):
    plain, empty = (
        PromptBuilder(chat_tokenizer, INSTRUCTION),
        PromptBuilder(chat_tokenizer, INSTRUCTION, response_prefix=""),
    )
    assert plain.prompt(["_P"], []) == empty.prompt(["_P"], []) and empty.full_response("x") == "x"
    with pytest.raises(ValueError, match="token-in policy"):
        PromptBuilder(chat_tokenizer, INSTRUCTION, response_prefix="<answer>").messages(["_P"], [])
