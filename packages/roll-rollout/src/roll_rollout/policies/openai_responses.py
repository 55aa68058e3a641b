"""The Responses API (`POST /v1/responses`) as chat messages in, and a chat reply as a `response` object out.

`responses_chat(body)` turns `instructions` and `input` (text, or items: messages, `function_call`,
`function_call_output`) and the flat function `tools` into the chat messages and tools the proxy renders
(`roll_rollout.policies.openai_chat`), so both endpoints give the policy the same prompt for the same conversation;
`response_object(...)` writes the reply's assistant message as `output` items (a `message` with
`output_text`, then one `function_call` item per tool call).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from roll_rollout.policies.openai_chat import ChatRequestError

_TEXT_PARTS = {"input_text", "output_text", "text"}
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def responses_chat(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(chat messages, chat tools) of a Responses request, or `ChatRequestError` saying what is expected."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ChatRequestError("instructions must be a string")
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for item in given:
            _add_item(messages, item)
    else:
        raise ChatRequestError("input must be a string or a non-empty list of items")
    return messages, _chat_tools(body.get("tools"))


def _add_item(messages: list[dict[str, Any]], item: Any) -> None:
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if kind == "message" and item.get("role") in _ROLES:
        messages.append({"role": _ROLES[item["role"]], "content": _text(item.get("content"))})
    elif kind == "function_call" and all(isinstance(item.get(k), str) for k in ("call_id", "name")):
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        elif last is not None and last["role"] == "assistant":
            last["tool_calls"] = [call]
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output" and isinstance(item.get("call_id"), str):
        messages.append(
            {"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))}
        )
    else:
        raise ChatRequestError(
            "each input item must be a message {role: user|system|developer|assistant, content}, a "
            "function_call {call_id, name, arguments} or a function_call_output {call_id, output}; got "
            f"{str(item)[:200]}"
        )


def _text(content: Any) -> str:
    """A message's or output's content as text: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") in _TEXT_PARTS for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    raise ChatRequestError(
        f"content must be a string or a list of text parts ({sorted(_TEXT_PARTS)}): the policy reads text only; "
        f"got {str(content)[:200]}"
    )


def _chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Flat Responses function tools ({type: function, name, parameters}) as chat tools."""
    if not tools:
        return None
    out = []
    for tool in tools if isinstance(tools, list) else [None]:
        if not (
            isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)
        ):
            raise ChatRequestError(
                "tools must be function tools {type: function, name, parameters}: the proxy runs no built-in "
                f"tools; got {str(tool)[:200]}"
            )
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def response_object(
    body: Mapping[str, Any],
    model: str,
    message: Mapping[str, Any],
    finish_reason: str,
    prompt_len: int,
    tokens: Sequence[str],
    log_probs: Sequence[float] | None,
) -> dict[str, Any]:
    """The `response` of one sampled reply; `log_probs` (one per entry of `tokens`) on its text when asked."""
    output: list[dict[str, Any]] = []
    if message.get("content"):
        part: dict[str, Any] = {"type": "output_text", "text": message["content"], "annotations": []}
        if log_probs is not None:
            part["logprobs"] = [
                {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                for t, lp in zip(tokens, log_probs, strict=True)
            ]
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call["id"],
                "name": fn["name"],
                "arguments": fn["arguments"],
                "status": "completed",
            }
        )
    cut = finish_reason == "length" and not message.get("tool_calls")
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": model,
        "instructions": body.get("instructions"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": list(body.get("tools") or []),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "usage": {
            "input_tokens": prompt_len,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": len(tokens),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_len + len(tokens),
        },
    }
