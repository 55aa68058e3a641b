"""Action parsing: formats, multi-action turns, chat tokens, and garbage that must never raise."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_envs.parsing import (
    MAX_ANSWER_CHARS,
    MAX_PARSE_CHARS,
    ParsedTurn,
    clean_text,
    extract_answer,
    make_action_matcher,
    parse_turn,
)

VOCAB = ["Left", "Down", "Right", "Up"]


def test_plain_and_word_tokenizer_spacing():
    assert extract_answer("<answer>Left</answer>") == "Left"
    assert extract_answer("<answer> Left </answer>") == "Left"
    assert extract_answer("< answer > Left < / answer >") == "Left"
    assert parse_turn("<answer> Left </answer>", VOCAB).actions == ("Left",)


def test_think_then_answer_and_case():
    turn = parse_turn("<think>the goal is below</think>\n<ANSWER>down</Answer>", VOCAB)
    assert turn.actions == ("Down",) and turn.valid


def test_answer_inside_think_is_ignored_when_a_later_answer_exists():
    text = "<think>maybe <answer>Up</answer>? no</think><answer>Left</answer>"
    assert parse_turn(text, VOCAB).actions == ("Left",)


def test_special_chat_tokens_and_control_characters_are_stripped():
    assert extract_answer("<answer>Left<|im_end|></answer><|endoftext|>") == "Left"
    assert extract_answer("<answer>\x00Le\x07ft</answer>") == "Le ft"
    assert parse_turn("<answer>\tRight\x00</answer></s>", VOCAB).actions == ("Right",)
    assert clean_text("a<|im_start|>b\n\nc") == "a b\n\nc"  # whitespace inside an answer is kept


def test_several_actions_are_capped_and_stop_at_first_invalid():
    assert (
        parse_turn("<answer>Left || Up || Up</answer>", VOCAB, max_actions=2).actions
        == parse_turn("<answer>Left||Up||Up</answer>", VOCAB, max_actions=2).actions
    )
    turn = parse_turn("<answer>Left || Up || Up</answer>", VOCAB, max_actions=2)
    assert turn.actions == ("Left", "Up") and turn.valid
    turn = parse_turn("<answer>Left || jump || Up</answer>", VOCAB, max_actions=3)
    assert turn.actions == ("Left",) and not turn.valid
    # at one action per turn `||` is part of the answer: "Left || Up" is no action of VOCAB
    assert parse_turn("<answer>Left || Up</answer>", VOCAB, max_actions=1) == ParsedTurn(
        (), False, "Left || Up", ("Left || Up",)
    )


def test_invalid_inputs():
    for text in [
        "",
        "Left",
        "<answer></answer>",
        "<answer>Left",
        "</answer>Left<answer>",
        "<answer>fly</answer>",
    ]:
        turn = parse_turn(text, VOCAB)
        assert not turn.valid and turn.actions == (), text
    assert not parse_turn(None, VOCAB).valid
    assert not parse_turn(b"<answer>Left</answer>", VOCAB).valid


def test_matcher_is_case_insensitive_and_trims_punctuation():
    match = make_action_matcher(VOCAB)
    assert match("LEFT") == "Left" and match(" up. ") == "Up" and match("upp") is None


ADVERSARIAL = {
    "lt_spaces": lambda n: "<" + " " * (n - 1),
    "lt_slash_spaces": lambda n: "< /" + " " * (n - 3),
    "answer_prefix_repeated": lambda n: "<answer" * (n // 7),
    "chat_token_prefix_repeated": lambda n: "<|" * (n // 2),
    "unclosed_think": lambda n: "<think>" + "x" * (n - 7),
    "think_repeated": lambda n: "<think>" * (n // 7),
    "open_answer_spaces": lambda n: "<answer>" + " " * (n - 8),
}
"""Inputs that make plain patterns backtrack, or that scan to the end (benchmarks use them too)."""


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_adversarial_megabyte_turns_are_invalid_and_an_answer_after_them_counts(kind):
    """The results on 1M characters (the cost is measured in benchmarks/test_bench_parsing.py)."""
    text = ADVERSARIAL[kind](1_000_000)
    assert parse_turn(text, VOCAB) == (ParsedTurn((), False, None, ()))
    assert extract_answer(text, max_chars=None) is None
    if kind not in ("open_answer_spaces", "answer_prefix_repeated"):
        # an answer right after the garbage is still found: it lies in the window looked at
        assert parse_turn(text + "</think><answer>Up</answer>", VOCAB).actions == ("Up",)


def test_only_the_last_max_parse_chars_are_looked_at():
    filler = "x" * MAX_PARSE_CHARS
    assert parse_turn("a" * 3_000_000 + "<answer>Up</answer>", VOCAB).actions == ("Up",)
    assert not parse_turn("<answer>Up</answer>" + filler, VOCAB).valid  # the answer is before the window
    assert extract_answer("<answer>Up</answer>" + filler, max_chars=None) == "Up"
    assert not parse_turn("<answer>" + "x" * 2_000_000 + "</answer>", VOCAB).valid
    window_edge = "<answer>Up</answer>" + "x" * (MAX_PARSE_CHARS - len("<answer>Up</answer>"))
    assert parse_turn(window_edge, VOCAB).actions == ("Up",)  # exactly at the edge: inside
    assert not parse_turn("y" + window_edge[1:] + "x", VOCAB).valid  # one char later: cut


# Plain backtracking patterns: the same matches as the parser's possessive ones, but quadratic on "<" +
# spaces. On short texts they are an independent reference for the possessive patterns.
_PLAIN_ANSWER = re.compile(r"<\s*(/?)\s*answer\s*>", re.IGNORECASE)
_PLAIN_THINK = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_PLAIN_SPECIAL = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|</?s>|<\s*/?\s*(?:eos|bos|pad|unk|endoftext)\s*>|\[/?INST\]", re.IGNORECASE
)


def reference_answer(text: str) -> str | None:
    """extract_answer written with the plain patterns (and no window)."""
    ends = [m.end() for m in _PLAIN_THINK.finditer(text)]
    pos = ends[-1] if ends else 0
    opening = next((m for m in _PLAIN_ANSWER.finditer(text, pos) if not m.group(1)), None)
    if opening is None:
        return None
    closing = next((m for m in _PLAIN_ANSWER.finditer(text, opening.end()) if m.group(1)), None)
    if closing is None or closing.start() - opening.end() > MAX_ANSWER_CHARS:
        return None
    inner = _PLAIN_SPECIAL.sub(" ", text[opening.end() : closing.start()])
    return "".join(" " if _is_control(c) else c for c in inner).strip()


def _is_control(c: str) -> bool:
    """A control or format character that is not a tab or a line break (those stay in an answer)."""
    code = ord(c)
    return (
        (code < 32 and c not in "\t\n\r")
        or 0x7F <= code <= 0x9F
        or c in "\u200b\u200c\u200d\u200e\u200f\u2028\u2029\ufeff"
    )


PIECES = [
    "<",
    ">",
    "/",
    " ",
    "\n",
    "answer",
    "think",
    "|",
    " || ",
    "Up",
    "left",
    "x",
    "\x00",
    "<|im_end|>",
    "</s>",
]
TAG_SOUP = st.lists(
    st.sampled_from([*PIECES, "<answer>", "</answer>", "<think>", "</think>", "< /think >"]), max_size=30
).map("".join)
"""Tag fragments and whole tags in every order."""

ANSWERISH = st.tuples(
    st.lists(st.sampled_from([*PIECES, "<think>", "</think>"]), max_size=6).map("".join),
    st.sampled_from(["<answer>", "< answer >", "<ANSWER\t>", "< /answer>", "<answer", "<answ er>"]),
    st.lists(st.sampled_from(PIECES), max_size=6).map("".join),
    st.sampled_from(["</answer>", "< / answer >", "</ANSWER\n>", "<answer>", "</answer", "</think>"]),
    st.lists(st.sampled_from([*PIECES, "</answer>"]), max_size=6).map("".join),
).map("".join)
"""An answer block, well formed or broken, inside fragments."""


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.one_of(ANSWERISH, TAG_SOUP, st.text(max_size=60)))
def test_possessive_patterns_match_what_the_plain_ones_match(text):
    assert extract_answer(text) == reference_answer(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.integers(1, 5))
def test_arbitrary_text_never_raises(text, cap):
    turn = parse_turn(text, VOCAB, max_actions=cap)
    assert len(turn.actions) <= cap
    assert all(a in VOCAB for a in turn.actions)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4), st.sampled_from(["", " ", "  \n"]))
def test_round_trip_of_well_formed_answers(actions, pad):
    text = f"<answer>{pad}{f'{pad}||{pad}'.join(a.lower() for a in actions)}{pad}</answer>"
    assert parse_turn(text, VOCAB, max_actions=4).actions == tuple(actions)


@pytest.mark.parametrize("env_id", ["frozen_lake", "sokoban"])
def test_instruction_mentions_multi_action_answers_only_when_allowed(env_id):
    import roll_envs

    one = roll_envs.make(env_id)
    three = roll_envs.make(env_id, max_actions_per_turn=3)
    assert "||" not in one.instruction
    assert "You may give up to 3 moves separated by ||." in three.instruction
    assert three.instruction.replace(" You may give up to 3 moves separated by ||.", "") == one.instruction
