"""Action parsing shared by every env: the env receives the raw model text and calls `parse_turn`.

Accepted formats, tags case-insensitive, whitespace inside tags ignored:

    <answer>Left</answer>
    <think>the goal is left</think><answer>Left</answer>
    <answer>Left || Up || Up</answer>          (several actions; capped per env)

Special chat tokens (`<|im_end|>`, `</s>`, ...) and control characters are removed, and the action
names are looked up case-insensitively. Anything else (no tags, an empty answer, megabytes of text)
gives an invalid turn, never an exception.

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

ACTION_SEPARATOR = "||"
"""Separator of several actions inside one `<answer>` block."""

MAX_ANSWER_CHARS = 4096
"""An answer longer than this is not parsed (no env's action text is that long)."""

MAX_PARSE_CHARS = 65_536
"""Only the last this many characters of a turn are parsed (16 times the longest answer, plus room for
the end of a long reasoning trace): the cost of a turn is bounded whatever its length."""

# Possessive `\s*+` never gives back whitespace: what follows it is never whitespace, so the matches are
# those of `\s*`, but a run of spaces after `<` is scanned once instead of once per split point.
_ANSWER_TAG = re.compile(r"<\s*+(/?)\s*+answer\s*+>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*+/\s*+think\s*+>", re.IGNORECASE)
_SPECIAL_TOKEN = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|</?s>|<\s*+/?\s*+(?:eos|bos|pad|unk|endoftext)\s*+>|\[/?INST\]", re.IGNORECASE
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_SPACES = re.compile(r"\s+")
_EDGE_PUNCTUATION = " \t.,;:!\"'`"

ActionMatcher = Callable[[str], str | None]
"""Maps one raw action token to the env's canonical action, or None when it is not an action."""


@dataclass(frozen=True)
class ParsedTurn:
    """What a model's turn asked for.

    Attributes:
        actions: the canonical actions to execute, in order: the recognised prefix of the tokens,
            at most the per-env cap long. Execution stops at the first unrecognised token.
        valid: an answer block was found, it held at least one token, and every token up to the
            cap was recognised (tokens beyond the cap are dropped without invalidating the turn).
        answer: the cleaned text inside the answer block, or None when there was none.
        tokens: the raw tokens of the answer, split on `||`.
    """

    actions: tuple[str, ...]
    valid: bool
    answer: str | None
    tokens: tuple[str, ...]


def clean_text(text: str) -> str:
    """Remove special chat tokens and control characters; collapse runs of whitespace to one space."""
    text = _SPECIAL_TOKEN.sub(" ", text)
    text = _CONTROL.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def extract_answer(text: object, *, max_chars: int | None = MAX_PARSE_CHARS) -> str | None:
    """The cleaned content of the first `<answer>...</answer>` block after any `</think>`, or None.

    Only the last `max_chars` characters of `text` are looked at (None: all of it; the cost stays
    linear in the length, only no longer bounded).

    >>> extract_answer("<think>go left</think> <answer> Left </answer><|im_end|>")
    'Left'
    >>> extract_answer("Left") is None
    True
    """
    if not isinstance(text, str):
        return None
    if max_chars is not None and len(text) > max_chars:
        text = text[-max_chars:]
    think_end = None
    for think_end in _THINK_CLOSE.finditer(text):  # noqa: B007 - the last match is wanted
        pass
    pos = think_end.end() if think_end else 0
    opening = None
    for match in _ANSWER_TAG.finditer(text, pos):
        if not match.group(1):
            opening = match
            break
    if opening is None:
        return None
    for match in _ANSWER_TAG.finditer(text, opening.end()):
        if match.group(1):
            if match.start() - opening.end() > MAX_ANSWER_CHARS:
                return None
            return clean_text(text[opening.end() : match.start()])
    return None


def split_actions(answer: str, separator: str = ACTION_SEPARATOR) -> tuple[str, ...]:
    """The stripped, non-empty tokens of an answer separated by `separator`."""
    return tuple(tok for tok in (t.strip() for t in answer.split(separator)) if tok)


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


def parse_turn(text: object, match: ActionMatcher | Iterable[str], max_actions: int = 1) -> ParsedTurn:
    """Parse a model's raw turn into the actions to execute (see the module docstring).

    Args:
        text: the raw model output; anything that is not a string is an invalid turn.
        match: an `ActionMatcher`, or the action vocabulary to build one from.
        max_actions: the per-env cap on actions per turn (>= 1).

    >>> parse_turn("<answer>left || UP || fly</answer>", ["Left", "Up"], max_actions=3)
    ParsedTurn(actions=('Left', 'Up'), valid=False, answer='left || UP || fly', tokens=('left', 'UP', 'fly'))
    """
    matcher = match if callable(match) else make_action_matcher(match)
    answer = extract_answer(text)
    if answer is None:
        return ParsedTurn((), False, None, ())
    tokens = split_actions(answer)
    actions: list[str] = []
    valid = bool(tokens)
    for token in tokens[: max(1, max_actions)]:
        action = matcher(token)
        if action is None:
            valid = False
            break
        actions.append(action)
    return ParsedTurn(tuple(actions), valid, answer, tokens)
