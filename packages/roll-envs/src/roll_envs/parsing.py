r"""Action parsing shared by every env: the env receives the raw model text and calls `parse_turn`.

Answer formats (`AnswerFormat`; an env chooses one with its config field `answer_format`, default `tags`):

- `tags`: the first `<answer>...</answer>` block after the last `</think>`, e.g.
  `<think>the goal is left</think><answer>Left</answer>`; tags case-insensitive, spaces allowed inside them.
- `boxed`: the last `\boxed{...}` after the last `</think>`, e.g. `\boxed{x^{2}}`; its braces must balance
  (`\{` and `\}` are literal and do not count; spaces may come before the opening brace).
- `tool_call`: a JSON tool call such as `{"name": "move", "arguments": {"dir": "left"}}`, bare, in a fenced
  block or in `<tool_call>` tags; `roll_envs.tool_calls` defines exactly where it is looked for.
- `raw`: the whole text after the last `</think>` (all of it without one).

In every format special chat tokens (`<|im_end|>`, `</s>`, ...) and control characters other than tabs and
line breaks are replaced by a space and the answer is stripped at both ends; whitespace inside it is kept
(a multi-line matrix stays multi-line). Several actions per turn only where the env allows them
(`max_actions` > 1): a text answer is then split on `||` (`<answer>Left || Up</answer>`), a tool call may
be several `<tool_call>` blocks or a JSON array; with one action per turn `||` is part of the answer.
The env's matcher maps each action text to an action; the default one (`make_action_matcher`) ignores
case, runs of whitespace and surrounding punctuation. Anything else (no answer, an empty one, megabytes of
text) gives an invalid turn, never an exception.

Cost: only the last `MAX_PARSE_CHARS` (65,536) characters of a turn are looked at, where the answer
of a model that thinks first is; a longer turn whose answer lies before them is an invalid turn. No
pattern can backtrack over an unbounded run (whitespace inside tags is matched possessively), so the
cost is linear in the text looked at and bounded for any input: a few milliseconds at most, whatever
the length of the turn (benchmarks/test_bench_parsing.py, docs/benchmarks.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from roll_envs.tool_calls import find_calls, render_calls

ACTION_SEPARATOR = "||"
"""Separator of several actions in one answer, where the env allows several (`max_actions` > 1)."""

MAX_ANSWER_CHARS = 4096
"""An answer longer than this is not parsed (no env's action text is that long)."""

MAX_PARSE_CHARS = 65_536
"""Only the last this many characters of a turn are parsed (16 times the longest answer, plus room for
the end of a long reasoning trace): the cost of a turn is bounded whatever its length."""


class AnswerFormat(StrEnum):
    """How an env reads the answer out of a model's turn (the module docstring defines each)."""

    TAGS = "tags"
    """`<answer>...</answer>` (the default)."""
    BOXED = "boxed"
    r"""`\boxed{...}`, braces balanced."""
    TOOL_CALL = "tool_call"
    """A JSON tool call (`roll_envs.tool_calls`)."""
    RAW = "raw"
    """The whole text after the last `</think>`."""


# Possessive `\s*+` never gives back whitespace: what follows it is never whitespace, so the matches are
# those of `\s*`, but a run of spaces after `<` is scanned once instead of once per split point.
_ANSWER_TAG = re.compile(r"<\s*+(/?)\s*+answer\s*+>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*+/\s*+think\s*+>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*+\{")
_BRACE = re.compile(r"\\[\s\S]|[{}]")  # an escaped character (skipped) or a brace
_DEPTH = {"{": 1, "}": -1}
_SPECIAL_TOKEN = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|</?s>|<\s*+/?\s*+(?:eos|bos|pad|unk|endoftext)\s*+>|\[/?INST\]", re.IGNORECASE
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_SPACES = re.compile(r"\s+")
_EDGE_PUNCTUATION = " \t.,;:!\"'`"

ActionMatcher = Callable[[str], str | None]
"""Maps one action text to the env's canonical action, or None when it is not an action."""


@dataclass(frozen=True)
class ParsedTurn:
    """What a model's turn asked for.

    Attributes:
        actions: the canonical actions to execute, in order: the recognised prefix of the tokens,
            at most the per-env cap long. Execution stops at the first unrecognised token.
        valid: an answer was found, it held at least one token, and every token up to the cap was
            recognised (tokens beyond the cap are dropped without invalidating the turn).
        answer: the cleaned answer text (for `tool_call`, the JSON text found), or None when there was none.
        tokens: the action texts of the answer: the answer itself at one action per turn, its `||`-separated
            parts (stripped, empty ones dropped) at several, a tool call's action (`ToolCall.action`).
    """

    actions: tuple[str, ...]
    valid: bool
    answer: str | None
    tokens: tuple[str, ...]


def clean_text(text: str) -> str:
    """Replace special chat tokens and control characters (not tabs, not line breaks) by a space; strip
    the ends. Whitespace inside is kept.

    >>> clean_text(" 1 2<|im_end|>\\n3 4\\x00 ")
    '1 2 \\n3 4'
    """
    text = _SPECIAL_TOKEN.sub(" ", text)
    return _CONTROL.sub(" ", text).strip()


def _window(text: object, max_chars: int | None) -> tuple[str, int] | None:
    """The text looked at and the position after its last `</think>` (0 without one); None for a non-str."""
    if not isinstance(text, str):
        return None
    if max_chars is not None and len(text) > max_chars:
        text = text[-max_chars:]
    think_end = None
    for think_end in _THINK_CLOSE.finditer(text):  # noqa: B007 - the last match is wanted
        pass
    return text, think_end.end() if think_end else 0


def _tagged(text: str, pos: int) -> str | None:
    opening = next((m for m in _ANSWER_TAG.finditer(text, pos) if not m.group(1)), None)
    if opening is None:
        return None
    closing = next((m for m in _ANSWER_TAG.finditer(text, opening.end()) if m.group(1)), None)
    if closing is None or closing.start() - opening.end() > MAX_ANSWER_CHARS:
        return None
    return text[opening.end() : closing.start()]


def _boxed(text: str, pos: int) -> str | None:
    last = None
    for last in _BOXED.finditer(text, pos):  # noqa: B007 - the last match is wanted
        pass
    if last is None:
        return None
    depth, start = 1, last.end()
    for match in _BRACE.finditer(text, start, start + MAX_ANSWER_CHARS + 1):
        depth += _DEPTH.get(match.group(), 0)
        if depth == 0:
            return text[start : match.start()]
    return None


def extract_answer(
    text: object, answer_format: str = AnswerFormat.TAGS, *, max_chars: int | None = MAX_PARSE_CHARS
) -> str | None:
    r"""The cleaned answer of a turn in `answer_format` (module docstring), or None when it has none.

    Only the last `max_chars` characters of `text` are looked at (None: all of it; the cost stays
    linear in the length, only no longer bounded). For `tool_call`, the JSON text found.

    >>> extract_answer("<think>go left</think> <answer> Left </answer><|im_end|>")
    'Left'
    >>> extract_answer("Left") is None
    True
    >>> extract_answer(r"so \boxed{\frac{1}{2}}", "boxed")
    '\\frac{1}{2}'
    """
    return _read(text, AnswerFormat(answer_format), 1, max_chars)[0]


def _read(
    text: object, answer_format: AnswerFormat, max_actions: int, max_chars: int | None = MAX_PARSE_CHARS
) -> tuple[str | None, tuple[str, ...], bool]:
    """(answer, action texts, whether every action text read) of a turn."""
    window = _window(text, max_chars)
    if window is None:
        return None, (), False
    text, pos = window
    if answer_format is AnswerFormat.TOOL_CALL:
        return find_calls(text, pos, max_actions)
    if answer_format is AnswerFormat.TAGS:
        inner = _tagged(text, pos)
    elif answer_format is AnswerFormat.BOXED:
        inner = _boxed(text, pos)
    else:
        inner = text[pos:]
    if inner is None:
        return None, (), False
    answer = clean_text(inner)
    if len(answer) > MAX_ANSWER_CHARS:
        return None, (), False
    tokens = split_actions(answer) if max_actions > 1 else ((answer,) if answer else ())
    return answer, tokens, bool(tokens)


def split_actions(answer: str, separator: str = ACTION_SEPARATOR) -> tuple[str, ...]:
    """The stripped, non-empty tokens of an answer separated by `separator`."""
    return tuple(tok for tok in (t.strip() for t in answer.split(separator)) if tok)


def render_answer(actions: Iterable[str], answer_format: str = AnswerFormat.TAGS) -> str:
    r"""The text of a turn answering `actions` in `answer_format`: what `parse_turn` reads back.

    >>> render_answer(["Left", "Up"])
    '<answer>Left || Up</answer>'
    >>> render_answer(["42"], "boxed")
    '\\boxed{42}'
    """
    actions = list(actions)
    fmt = AnswerFormat(answer_format)
    if fmt is AnswerFormat.TOOL_CALL:
        return render_calls(actions)
    joined = f" {ACTION_SEPARATOR} ".join(actions)
    if fmt is AnswerFormat.TAGS:
        return f"<answer>{joined}</answer>"
    if fmt is AnswerFormat.BOXED:
        return rf"\boxed{{{joined}}}"
    return joined


def normalize_action(token: str) -> str:
    """Lower case, single spaces, no surrounding punctuation: the key actions are looked up by."""
    return _SPACES.sub(" ", token).strip(_EDGE_PUNCTUATION).lower()


class VocabularyMatcher:
    """A case-insensitive `ActionMatcher` over a fixed vocabulary, returning the canonical spelling (picklable)."""

    def __init__(self, vocabulary: Iterable[str]) -> None:
        self.table = {normalize_action(name): name for name in vocabulary}

    def __call__(self, token: str) -> str | None:
        """The canonical action `token` names, or None."""
        return self.table.get(normalize_action(token))


def make_action_matcher(vocabulary: Iterable[str]) -> ActionMatcher:
    """A case-insensitive matcher over a fixed action vocabulary, returning the canonical spelling.

    >>> match = make_action_matcher(["Left", "Right"])
    >>> match("  LEFT "), match("jump")
    ('Left', None)
    """
    return VocabularyMatcher(vocabulary)


def parse_turn(
    text: object,
    match: ActionMatcher | Iterable[str],
    max_actions: int = 1,
    answer_format: str = AnswerFormat.TAGS,
) -> ParsedTurn:
    """Parse a model's raw turn into the actions to execute (see the module docstring).

    Args:
        text: the raw model output; anything that is not a string is an invalid turn.
        match: an `ActionMatcher`, or the action vocabulary to build one from.
        max_actions: the per-env cap on actions per turn (>= 1); above 1, `||` separates actions.
        answer_format: an `AnswerFormat` or its value.

    >>> parse_turn("<answer>left || UP || fly</answer>", ["Left", "Up"], max_actions=3)
    ParsedTurn(actions=('Left', 'Up'), valid=False, answer='left || UP || fly', tokens=('left', 'UP', 'fly'))
    >>> parse_turn("<answer>x || y</answer>", lambda token: token).actions
    ('x || y',)
    """
    matcher = match if callable(match) else make_action_matcher(match)
    cap = max(1, max_actions)
    answer, tokens, complete = _read(text, AnswerFormat(answer_format), cap)
    if answer is None:
        return ParsedTurn((), False, None, ())
    actions: list[str] = []
    valid = complete
    for token in tokens[:cap]:
        action = matcher(token)
        if action is None:
            valid = False
            break
        actions.append(action)
    return ParsedTurn(tuple(actions), valid, answer, tokens)
