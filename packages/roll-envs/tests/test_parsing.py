"""Action parsing: formats, multi-action turns, chat tokens, and garbage that must never raise."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_envs.parsing import clean_text, extract_answer, make_action_matcher, parse_turn

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
    assert clean_text("a<|im_start|>b\n\nc") == "a b c"


def test_several_actions_are_capped_and_stop_at_first_invalid():
    assert (
        parse_turn("<answer>Left || Up || Up</answer>", VOCAB, max_actions=2).actions
        == parse_turn("<answer>Left||Up||Up</answer>", VOCAB, max_actions=2).actions
    )
    turn = parse_turn("<answer>Left || Up || Up</answer>", VOCAB, max_actions=2)
    assert turn.actions == ("Left", "Up") and turn.valid
    turn = parse_turn("<answer>Left || jump || Up</answer>", VOCAB, max_actions=3)
    assert turn.actions == ("Left",) and not turn.valid
    assert parse_turn("<answer>Left || Up</answer>", VOCAB, max_actions=1).actions == ("Left",)


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


def test_megabytes_of_text_are_parsed_in_linear_time():
    for text in [
        "<answer>" * 200_000,
        "<" * 1_000_000,
        "a" * 3_000_000 + "<answer>Up</answer>",
        "<answer>" + "x" * 2_000_000 + "</answer>",
        "</think>" * 100_000,
    ]:
        start = time.perf_counter()
        turn = parse_turn(text, VOCAB)
        assert time.perf_counter() - start < 1.0
        assert turn.valid == text.endswith("<answer>Up</answer>")


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
