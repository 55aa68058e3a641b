"""OpenAI chat requests as token ids, and sampled ids as OpenAI chat replies: one rendering for roll's servers.

`chat_prompt_ids(tokenizer, messages, tools)` is the prompt a chat.completions request stands for, as the
policy is asked for it; `assistant_message(text, tools)` reads the sampled text back into the reply's
message, tool calls included. `roll serve` (roll_pipeline.serving.openai_server) and the training proxy of
`openai_agent` tags (roll_rollout.policies.agent_proxy) both render through them.

Tools reach the prompt in one of two ways:

- a chat template that mentions `tools` (Qwen, Hermes, Llama 3.1 ...) gets them as `tools=`, with the
  assistant messages' `tool_calls` (arguments decoded to objects, as those templates expect) and the `tool`
  messages as they are;
- any other template (the tiny model's, SmolLM2's) gets them written into the system message
  (`TOOLS_PREAMBLE`, then one JSON schema a line), each earlier assistant call as a
  `<tool_call>{"name": ..., "arguments": ...}</tool_call>` block after its text, and each tool result as a
  user message `<tool_response>...</tool_response>`.

A reply's tool calls are read with `roll_envs.tool_calls.find_calls` (the `tool_call` answer format: tagged
blocks, a fenced block, or a bare JSON object), only when the request offered tools.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from roll_envs.tool_calls import ToolCall, find_calls

from roll_rollout.prompts import ChatTokenizer

TOOLS_PREAMBLE = (
    "You may call one or more functions. The functions you can call, one JSON schema a line:\n"
    "{tools}\n"
    'To call one, answer with <tool_call>{{"name": <function name>, "arguments": <arguments object>}}'
    "</tool_call>."
)
"""The system text that lists the tools for a chat template that does not render them itself."""

MAX_TOOL_CALLS = 16
"""Tool calls read from one reply at most."""


class ChatRequestError(ValueError):
    """A chat request that cannot be rendered as sent (HTTP 400): the message says what is expected."""


def template_renders_tools(tokenizer: ChatTokenizer) -> bool:
    """Whether the tokenizer's chat template reads `tools` (else roll writes them into the system message)."""
    return "tools" in str(getattr(tokenizer, "chat_template", None) or "")


def chat_prompt_ids(tokenizer: ChatTokenizer, messages: Any, tools: Any = None) -> list[int]:
    """The prompt ids of a chat request's `messages` (and `tools`), with the generation prompt."""
    _check_messages(messages)
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ChatRequestError("tools must be a list of {type: function, function: {...}} objects")
    tools = tools or None
    if template_renders_tools(tokenizer):
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        rendered = [_native_message(m) for m in messages]
    else:
        kwargs, rendered = {}, _plain_messages(messages, tools)
    ids = tokenizer.apply_chat_template(rendered, add_generation_prompt=True, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def assistant_message(text: str, tools: Any = None) -> tuple[dict[str, Any], bool]:
    """(the reply's assistant message, whether it holds tool calls) of the sampled `text`.

    With tools offered, the calls found in the text become `tool_calls` (arguments as JSON text, as the
    API sends them) and `content` is the text before them (None when empty).
    """
    if not tools:
        return {"role": "assistant", "content": text}, False
    found, calls, _ = read_tool_calls(text)
    if found is None or not calls:
        return {"role": "assistant", "content": text}, False
    cut = _first_call_at(text, _after_think(text), found)
    content = text[:cut].strip() or None
    tool_calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]
    return {"role": "assistant", "content": content, "tool_calls": tool_calls}, True


def read_tool_calls(text: str) -> tuple[str | None, list[ToolCall], bool]:
    """(the call text found after the last `</think>` or None, the calls read, whether every call read)."""
    found, actions, complete = find_calls(text, _after_think(text), MAX_TOOL_CALLS)
    return found, [c for c in (ToolCall.from_action(a) for a in actions) if c is not None], complete


def _after_think(text: str) -> int:
    think = text.rfind("</think>")
    return think + len("</think>") if think >= 0 else 0


def _first_call_at(text: str, start: int, found: str) -> int:
    """Where the text of the calls begins: the first `<tool_call>` tag, fence or JSON text found."""
    candidates = [i for i in (text.find("<tool_call>", start), text.find("```", start)) if i >= 0]
    first_line = found.splitlines()[0] if found else ""
    at = text.find(first_line, start) if first_line else -1
    if at >= 0:
        candidates.append(at)
    return min(candidates) if candidates else len(text)


def _check_messages(messages: Any) -> None:
    if not (isinstance(messages, list) and messages and all(_is_message(m) for m in messages)):
        raise ChatRequestError(
            "messages must be a non-empty list of {role, content} objects (content a string, or null on an "
            "assistant message with tool_calls)"
        )


def _is_message(m: Any) -> bool:
    if not (isinstance(m, dict) and isinstance(m.get("role"), str)):
        return False
    content = m.get("content")
    if isinstance(content, list):  # the API's content parts: only text parts render
        return all(isinstance(p, dict) and p.get("type") == "text" for p in content)
    return isinstance(content, str) or (content is None and bool(m.get("tool_calls")))


def _text(content: Any) -> str:
    """A message's content as text (content parts joined; None as empty)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content)
    return content or ""


def _calls_of(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, arguments object) of an assistant message's `tool_calls`."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ChatRequestError(
                "each tool_calls entry must be {type: function, function: {name, arguments}}"
            )
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise ChatRequestError(f"tool call {fn['name']!r}: arguments are not JSON ({exc})") from exc
        out.append((fn["name"], args))
    return out


def _native_message(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"))}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in _calls_of(m)
        ]
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    return out


def tool_call_block(name: str, arguments: Any) -> str:
    """A tool call as a template without tool support shows it: `<tool_call>{"name", "arguments"}</tool_call>`."""
    return (
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "</tool_call>"
    )


def _plain_messages(messages: Sequence[Mapping[str, Any]], tools: list[dict] | None) -> list[dict[str, str]]:
    """Messages a template without tool support renders: {role, content: str}, tools in the system text."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, text = m["role"], _text(m.get("content"))
        if role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
            continue
        blocks = [tool_call_block(n, a) for n, a in _calls_of(m)]
        out.append(
            {
                "role": role,
                "content": "\n".join([text, *blocks]) if text and blocks else text + "".join(blocks),
            }
        )
    if tools:
        listed = TOOLS_PREAMBLE.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{listed}"}
        else:
            out.insert(0, {"role": "system", "content": listed})
    return out


def chat_completion(
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    prompt_len: int,
    tokens: Sequence[str],
    log_probs: Sequence[float] | None,
) -> dict[str, Any]:
    """A `chat.completion` object of one choice; `log_probs` (one per entry of `tokens`) when asked for."""
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish_reason}
    if log_probs is not None:
        content = [{"token": t, "logprob": lp} for t, lp in zip(tokens, log_probs, strict=True)]
        choice["logprobs"] = {"content": content}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_len,
            "completion_tokens": len(tokens),
            "total_tokens": prompt_len + len(tokens),
        },
    }
