"""JSON tool calls: the `tool_call` answer format, read from a model's turn.

Where the call is found, in the text after the last `</think>` (the first rule that applies):

1. `<tool_call>...</tool_call>` blocks (the Hermes and Qwen chat templates): each block holds one call;
   several blocks are several calls where the env allows several actions per turn, else the first counts;
2. a fenced code block (three backticks, optionally a language name such as `json` on the fence's line):
   the first one's content is one call, or a JSON array of calls where several actions are allowed;
3. otherwise the span from the first `{` to the last `}`: one call, e.g.
   `I go left: {"name": "move", "arguments": {"direction": "left"}}`.

A call is a JSON object with a non-empty string `name` and, optionally, `arguments` (or `parameters`, Llama's
spelling, not both): an object, or a string holding a JSON object (the OpenAI API's spelling). Other keys
are ignored. NaN and Infinity are not JSON. A call with no arguments reads as the action `name`, so an env
with a fixed action list takes `{"name": "Left"}` as `Left`; a call with arguments reads as the canonical
JSON text `{"name": ..., "arguments": {...}}` (argument keys sorted), which `ToolCall.from_action` turns back
into a `ToolCall`. A text with no call is an invalid turn; a malformed call makes the turn invalid, and
the calls before it are executed (as with `||`-separated actions).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

MAX_CALL_CHARS = 4096
"""A call's JSON text longer than this is not read (the same bound as any answer's)."""

_TOOL_CALL_TAG = re.compile(r"<\s*+(/?)\s*+tool_call\s*+>", re.IGNORECASE)
_FENCE = "```"
_FENCE_LANGUAGE = re.compile(r"[\w-]*+[ \t]*+\n?")


class ToolCall(NamedTuple):
    """One tool call: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]

    @property
    def action(self) -> str:
        """The action text the env receives: `name` alone without arguments, else the canonical JSON.

        >>> ToolCall("move", {"dir": "left"}).action
        '{"name": "move", "arguments": {"dir": "left"}}'
        >>> ToolCall("Left", {}).action
        'Left'
        """
        if not self.arguments:
            return self.name
        args = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        return f'{{"name": {json.dumps(self.name, ensure_ascii=False)}, "arguments": {args}}}'

    @classmethod
    def from_action(cls, action: str) -> ToolCall | None:
        """The call an action text stands for (the inverse of `action`), or None when it is not one.

        >>> ToolCall.from_action('{"name": "move", "arguments": {"dir": "left"}}')
        ToolCall(name='move', arguments={'dir': 'left'})
        >>> ToolCall.from_action("Left")
        ToolCall(name='Left', arguments={})
        """
        text = action.strip()
        if not text.startswith("{"):
            return cls(text, {}) if text else None
        return read_call(_loads(text))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str) -> Any:
    """`json.loads`, or None for malformed, too long or too deeply nested JSON (never raises)."""
    if len(text) > MAX_CALL_CHARS:
        return None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def read_call(value: Any) -> ToolCall | None:
    """A decoded JSON value as a `ToolCall` (see the module docstring), or None."""
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    if "arguments" in value and "parameters" in value:
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        args = _loads(args)
    if not isinstance(args, dict):
        return None
    return ToolCall(name.strip(), args)


def _blocks(text: str, pos: int, limit: int) -> list[str] | None:
    """The contents of up to `limit` `<tool_call>` blocks from `pos`, or None when there is none."""
    found: list[str] = []
    scan = pos
    while len(found) < limit:
        opening = next((m for m in _TOOL_CALL_TAG.finditer(text, scan) if not m.group(1)), None)
        if opening is None:
            break
        closing = next((m for m in _TOOL_CALL_TAG.finditer(text, opening.end()) if m.group(1)), None)
        if closing is None:
            found.append("")  # an unclosed block is a malformed call
            break
        found.append(text[opening.end() : closing.start()])
        scan = closing.end()
    return found or None


def _fenced(text: str, pos: int) -> str | None:
    """The content of the first fenced code block from `pos`, without its language line, or None."""
    start = text.find(_FENCE, pos)
    if start < 0:
        return None
    body = _FENCE_LANGUAGE.match(text, start + len(_FENCE))
    begin = body.end() if body else start + len(_FENCE)
    end = text.find(_FENCE, begin)
    return text[begin:end] if end >= 0 else None


def find_calls(text: str, pos: int, max_calls: int) -> tuple[str | None, tuple[str, ...], bool]:
    """(the JSON text found, the actions of its calls, whether every call read) from `text[pos:]`.

    The JSON text is None when the text holds no candidate at all; the actions stop at the first call
    that does not read (then the third item is False). At most `max_calls` actions.
    """
    blocks = _blocks(text, pos, max_calls)
    if blocks is not None:
        calls = [read_call(_loads(b.strip())) for b in blocks]
        return "\n".join(b.strip() for b in blocks), *_actions(calls)
    candidate = _fenced(text, pos)
    if candidate is None:
        first, last = text.find("{", pos), text.rfind("}", pos)
        if first < 0 or last < first:
            return None, (), False
        candidate = text[first : last + 1]
    candidate = candidate.strip()
    value = _loads(candidate)
    if isinstance(value, list) and max_calls > 1 and value:
        return candidate, *_actions([read_call(v) for v in value[:max_calls]])
    return candidate, *_actions([read_call(value)])


def _actions(calls: list[ToolCall | None]) -> tuple[tuple[str, ...], bool]:
    actions: list[str] = []
    for call in calls:
        if call is None:
            return tuple(actions), False
        actions.append(call.action)
    return tuple(actions), bool(actions)


def render_calls(actions: tuple[str, ...] | list[str]) -> str:
    """Actions written as the JSON a model would answer with: one call object, or a fenced array of them.

    >>> render_calls(["Left"])
    '{"name": "Left", "arguments": {}}'
    """
    calls = [ToolCall.from_action(a) or ToolCall(a, {}) for a in actions]
    as_json = [json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) for c in calls]
    if len(as_json) == 1:
        return as_json[0]
    return "```json\n[" + ", ".join(as_json) + "]\n```"
