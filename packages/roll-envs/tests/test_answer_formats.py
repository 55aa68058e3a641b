r"""Answer formats: `<answer>` tags, `\boxed{}`, JSON tool calls and raw text; whitespace kept inside an answer;
`||` splits actions only where the env allows several. Expected values are written by hand, and the boxed
reader is checked against a character-by-character reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import roll_envs
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_envs import ActionOutcome, BaseEnv, EnvConfig, EnvConfigError, check_env
from roll_envs.parsing import (
    MAX_ANSWER_CHARS,
    AnswerFormat,
    ParsedTurn,
    extract_answer,
    parse_turn,
    render_answer,
)
from roll_envs.tool_calls import ToolCall

VOCAB = ["Left", "Down", "Right", "Up"]


def any_text(token: str) -> str:
    """The matcher of an open answer space: every non-empty text is the action."""
    return token


# ---- whitespace and `||` -----------------------------------------------------------------------------------


def test_a_multi_line_answer_keeps_its_lines():
    text = "<think>rows then columns</think><answer>\n 1 2\n3  4\n</answer><|im_end|>"
    assert extract_answer(text) == "1 2\n3  4"
    assert parse_turn(text, any_text).actions == ("1 2\n3  4",)


def test_tabs_and_line_breaks_stay_other_controls_become_spaces():
    assert extract_answer("<answer>a\tb\r\nc\x00d\u200be</answer>") == "a\tb\r\nc d e"


def test_double_bar_is_part_of_the_answer_at_one_action_per_turn():
    assert parse_turn("<answer>x || y</answer>", any_text) == ParsedTurn(
        ("x || y",), True, "x || y", ("x || y",)
    )
    assert parse_turn("<answer>x || y</answer>", any_text, max_actions=2).actions == ("x", "y")
    assert parse_turn(r"\boxed{a || b}", any_text, 1, "boxed").actions == ("a || b",)
    assert parse_turn("a || b", any_text, 3, "raw").actions == ("a", "b")


def test_vocabulary_lookups_still_ignore_case_spacing_and_punctuation():
    assert parse_turn("<answer>\n  LEFT.\n</answer>", VOCAB).actions == ("Left",)
    assert parse_turn("<answer>Left  ||\nup</answer>", VOCAB, max_actions=2).actions == ("Left", "Up")


# ---- \boxed{} -----------------------------------------------------------------------------------------------

BOXED_CASES = [
    (r"\boxed{42}", "42"),
    (r"The answer is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
    (r"first \boxed{a}, finally \boxed{b}", "b"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
    (r"\boxed {7}", "7"),
    (r"\boxed{x", None),
    (r"\boxed{a} then \boxed{b", None),
    (r"<think>\boxed{1}</think> so \boxed{2}", "2"),
    (r"\boxed{1}</think> no box after thinking", None),
    (r"\boxed{a\\}", "a\\\\"),
    (
        "\\boxed{\\begin{pmatrix} 1 & 2 \\\\\n 3 & 4 \\end{pmatrix}}",
        "\\begin{pmatrix} 1 & 2 \\\\\n 3 & 4 \\end{pmatrix}",
    ),
    (r"\boxed{ }", ""),
    ("no box", None),
]


@pytest.mark.parametrize(("text", "expected"), BOXED_CASES)
def test_boxed_answers(text, expected):
    assert extract_answer(text, "boxed") == expected


def test_boxed_answers_longer_than_the_limit_are_none():
    inside = "x" * MAX_ANSWER_CHARS
    assert extract_answer(rf"\boxed{{{inside}}}", "boxed") == inside
    assert extract_answer(rf"\boxed{{{inside}x}}", "boxed") is None


def reference_boxed(text: str) -> str | None:
    """The last `\\boxed{` after the last `</think>`, read character by character (no regular expressions)."""
    start = text.rfind("</think>")
    text = text[start + len("</think>") :] if start >= 0 else text
    opening = None
    for i in range(len(text)):
        if text.startswith("\\boxed", i):
            j = i + len("\\boxed")
            while j < len(text) and text[j].isspace():
                j += 1
            if j < len(text) and text[j] == "{":
                opening = j + 1
    if opening is None:
        return None
    depth, i = 1, opening
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        depth += 1 if c == "{" else -1 if c == "}" else 0
        if depth == 0:
            return text[opening:i].strip()
        i += 1
    return None


BOX_SOUP = st.lists(
    st.sampled_from(["\\boxed", "\\boxed{", "{", "}", "\\", "\\{", "\\}", " ", "\n", "a", "1", "</think>"]),
    max_size=24,
).map("".join)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(BOX_SOUP)
def test_boxed_reader_agrees_with_a_character_by_character_reference(text):
    assert extract_answer(text, "boxed") == reference_boxed(text)


# ---- JSON tool calls --------------------------------------------------------------------------------------------

MOVE_LEFT = '{"name": "move", "arguments": {"dir": "left"}}'

TOOL_CASES = [
    # (text, max_actions, expected tokens, expected valid)
    ('I go: {"name": "move", "arguments": {"dir": "left"}}.', 1, (MOVE_LEFT,), True),
    ('{"name": "Left"}', 1, ("Left",), True),
    ('{"name": "Left", "arguments": {}}', 1, ("Left",), True),
    (
        '{"name": "f", "arguments": "{\\"b\\": 2, \\"a\\": 1}"}',
        1,
        ('{"name": "f", "arguments": {"a": 1, "b": 2}}',),
        True,
    ),
    ('{"name": "move", "parameters": {"dir": "left"}}', 1, (MOVE_LEFT,), True),
    ('{"name": "move", "arguments": {}, "parameters": {}}', 1, (), False),
    ('{"type": "function", "name": " move ", "arguments": {"dir": "left"}, "id": 3}', 1, (MOVE_LEFT,), True),
    ('```json\n{"name": "move", "arguments": {"dir": "left"}}\n```', 1, (MOVE_LEFT,), True),
    ('```\n[{"name": "Left"}, {"name": "Up"}]\n```', 2, ("Left", "Up"), True),
    ('```\n[{"name": "Left"}, {"name": "Up"}]\n```', 1, (), False),
    ('```\n[{"name": "Left"}, {"nome": "Up"}, {"name": "Up"}]\n```', 3, ("Left",), False),
    (
        '<tool_call>\n{"name": "Left"}\n</tool_call>\n<tool_call>{"name": "Up"}</tool_call>',
        2,
        ("Left", "Up"),
        True,
    ),
    ('<tool_call>{"name": "Left"}</tool_call><tool_call>{"name": "Up"}</tool_call>', 1, ("Left",), True),
    ('<tool_call>{"name": "Left"}', 1, (), False),
    ('<think>{"name": "Up"}</think> {"name": "Down"}', 1, ("Down",), True),
    ('{"name": "Left", "arguments": {"x": NaN}}', 1, (), False),
    ('{"name": "", "arguments": {}}', 1, (), False),
    ('{"name": "Left" "arguments": {}}', 1, (), False),
    ('{"name": "f", "arguments": [1]}', 1, (), False),
    ("[1] {", 1, (), False),
]


@pytest.mark.parametrize(("text", "cap", "tokens", "valid"), TOOL_CASES)
def test_tool_calls(text, cap, tokens, valid):
    turn = parse_turn(text, any_text, cap, "tool_call")
    assert turn.tokens == tokens and turn.valid is valid
    assert turn.actions == tokens[:cap]


def test_no_json_at_all_is_no_answer():
    assert parse_turn("Left", VOCAB, 1, "tool_call") == ParsedTurn((), False, None, ())
    assert extract_answer("so } then {", "tool_call") is None


def test_a_call_without_arguments_reads_as_a_vocabulary_action():
    assert parse_turn('{"name": "left"}', VOCAB, 1, "tool_call").actions == ("Left",)


def test_tool_call_actions_turn_back_into_calls():
    assert ToolCall.from_action(MOVE_LEFT) == ToolCall("move", {"dir": "left"})
    assert ToolCall.from_action("Up") == ToolCall("Up", {})
    assert ToolCall.from_action("{broken") is None
    assert ToolCall("f", {"b": [1, {"d": 2, "c": 3}], "a": "é"}).action == (
        '{"name": "f", "arguments": {"a": "é", "b": [1, {"c": 3, "d": 2}]}}'
    )


def test_deeply_nested_json_is_an_invalid_turn_not_an_exception():
    text = '{"name": "f", "arguments": ' + "[" * 3000 + "]" * 3000 + "}"
    assert not parse_turn(text, any_text, 1, "tool_call").valid


# ---- raw text ---------------------------------------------------------------------------------------------------


def test_raw_answers():
    assert extract_answer("<think>hmm</think>\n 42 \n", "raw") == "42"
    assert extract_answer("  7<|im_end|>", "raw") == "7"
    assert extract_answer("", "raw") == ""
    assert extract_answer("x" * (MAX_ANSWER_CHARS + 1), "raw") is None
    assert not parse_turn("   ", any_text, 1, "raw").valid


# ---- writing answers ----------------------------------------------------------------------------------------------

ACTION_TEXT = st.text(alphabet="ab1 \n.", min_size=1, max_size=12).filter(lambda s: s.strip() == s and s)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(ACTION_TEXT, min_size=1, max_size=3), st.sampled_from(list(AnswerFormat)))
def test_rendered_answers_parse_back_to_their_actions(actions, fmt):
    text = render_answer(actions, fmt)
    assert parse_turn(text, any_text, len(actions), fmt).actions == tuple(actions)


def test_rendered_answers_by_hand():
    assert render_answer(["Left"]) == "<answer>Left</answer>"
    assert render_answer(["Left", "Up"], "raw") == "Left || Up"
    assert render_answer(["x^2"], "boxed") == r"\boxed{x^2}"
    assert render_answer(["Left"], "tool_call") == '{"name": "Left", "arguments": {}}'
    assert render_answer([MOVE_LEFT, "Up"], "tool_call") == (
        '```json\n[{"name": "move", "arguments": {"dir": "left"}}, {"name": "Up", "arguments": {}}]\n```'
    )


# ---- envs choosing a format ---------------------------------------------------------------------------------------


def test_builtin_instructions_are_unchanged_with_the_default_format():
    assert roll_envs.make("frozen_lake").instruction.endswith(
        "Answer with one move, like <answer>Left</answer>."
    )
    assert roll_envs.make("four_choice").instruction.endswith(
        "Answer with one letter, like <answer>A</answer>."
    )
    assert roll_envs.make("frozen_lake", answer_format="boxed").instruction.endswith(r"like \boxed{Left}.")


@pytest.mark.parametrize("fmt", ["boxed", "tool_call", "raw"])
def test_frozen_lake_plays_the_same_in_every_format(fmt):
    rng = np.random.default_rng(0)
    tags, other = (
        roll_envs.make("frozen_lake", max_steps=30),
        roll_envs.make("frozen_lake", max_steps=30, answer_format=fmt),
    )
    for seed in range(5):
        a, b = tags.reset(seed=seed), other.reset(seed=seed)
        assert a == b
        for _ in range(30):
            move = str(rng.choice(VOCAB))
            a, b = tags.step(f"<answer>{move}</answer>"), other.step(render_answer([move], fmt))
            assert a == b and a[4]["action_is_valid"]
            if a[2] or a[3]:
                break


def test_an_unknown_answer_format_is_a_config_error():
    with pytest.raises(EnvConfigError, match="answer_format"):
        roll_envs.make("frozen_lake", answer_format="xml")


class MatrixEnv(BaseEnv):
    """Transpose a 2x2 matrix: an open answer space (no `valid_actions`), answered in `\\boxed{}`."""

    config_cls = EnvConfig

    @property
    def instruction(self) -> str:
        return f"Transpose the matrix; rows on lines, like {self.format_answer('1 2' + chr(10) + '3 4')}."

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.m = rng.integers(0, 10, (2, 2)).tolist()
        self.solved = False

    def apply_action(self, action: str) -> ActionOutcome:
        want = "\n".join(" ".join(str(self.m[r][c]) for r in range(2)) for c in range(2))
        self.solved = action == want
        return ActionOutcome(float(self.solved), True, True)

    def text_observation(self) -> str:
        return "\n".join(" ".join(map(str, row)) for row in self.m)

    def is_success(self) -> bool:
        return self.solved


def test_an_open_answer_space_takes_a_multi_line_boxed_matrix():
    env = MatrixEnv(answer_format="boxed")
    obs, _ = env.reset(seed=3)
    rows = [row.split() for row in obs.split("\n")]
    transposed = f"{rows[0][0]} {rows[1][0]}\n{rows[0][1]} {rows[1][1]}"
    _, reward, terminated, _, info = env.step(f"The transpose is \\boxed{{{transposed}}}")
    assert (reward, terminated, info["success"], info["action_is_valid"]) == (1.0, True, True, True)
    assert info["executed_actions"] == [transposed]


def test_an_open_answer_space_passes_check_env_in_every_format():
    for fmt in AnswerFormat:
        assert check_env(MatrixEnv(answer_format=fmt)) == []


def test_cli_play_writes_typed_moves_in_the_envs_format():
    from roll_envs import cli

    env = roll_envs.make("sokoban", answer_format="boxed", max_steps=5)
    lines, shown = iter(["left", r"\boxed{Up}", "<answer>Up</answer>", ":q"]), []
    cli.play(env, 0, read=lambda prompt: next(lines), write=shown.append)
    infos = [line for line in shown if line.startswith("info ")]
    assert ['"action_is_valid": true' in i for i in infos] == [True, True, False]  # tags are not boxed
    assert all('"action_is_refused": false' in i for i in infos)
