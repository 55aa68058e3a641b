"""Streamed replies (`stream: true`) as server-sent events, in the wire format the `openai` client parses.

The policy samples a whole reply at once (token ids in, token ids out), so a stream is the finished reply
cut into the events a streaming server sends, all written at once: `chat_stream(completion)` gives
`chat.completion.chunk`s (`data: {...}`, then `data: [DONE]`), `response_stream(response)` the Responses
events (`event: <type>` and `data: {...}`, from `response.created` to `response.completed`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any


def _sse(data: Mapping[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


def chat_stream(completion: Mapping[str, Any], include_usage: bool) -> str:
    """The SSE body of a one-choice `chat.completion`: a role chunk, the content (with its log-probs), one
    chunk per tool call, the finish reason; with `include_usage`, a last chunk of no choices with the usage."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> str:
        c = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return _sse({**head, "choices": [c], **extra})

    parts = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        parts.append(chunk({"content": message["content"]}, logprobs=choice.get("logprobs")))
    for i, call in enumerate(message.get("tool_calls") or []):
        parts.append(chunk({"tool_calls": [{"index": i, **call}]}))
    parts.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        parts.append(_sse({**head, "choices": [], "usage": completion["usage"]}))
    return "".join(parts) + "data: [DONE]\n\n"


def response_stream(response: Mapping[str, Any]) -> str:
    """The SSE body of a `response`: created, in_progress, each output item added / its content / done, then
    `response.completed` (or `response.incomplete`) carrying the whole response."""
    events = list(_response_events(response))
    return "".join(_sse({**e, "sequence_number": i}, e["type"]) for i, e in enumerate(events))


def _response_events(response: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    started = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield {"type": "response.created", "response": started}
    yield {"type": "response.in_progress", "response": started}
    for at, item in enumerate(response["output"]):
        where = {"output_index": at, "item_id": item["id"]}
        if item["type"] == "message":
            yield {"type": "response.output_item.added", "output_index": at, "item": {**item, "content": []}}
            for ci, part in enumerate(item["content"]):
                empty = {**part, "text": "", "logprobs": []}
                yield {"type": "response.content_part.added", **where, "content_index": ci, "part": empty}
                logprobs = part.get("logprobs") or []
                text = {"content_index": ci, "logprobs": logprobs}
                yield {"type": "response.output_text.delta", **where, **text, "delta": part["text"]}
                yield {"type": "response.output_text.done", **where, **text, "text": part["text"]}
                yield {"type": "response.content_part.done", **where, "content_index": ci, "part": part}
        else:  # a function_call
            yield {
                "type": "response.output_item.added",
                "output_index": at,
                "item": {**item, "arguments": ""},
            }
            yield {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]}
            yield {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]}
        yield {"type": "response.output_item.done", "output_index": at, "item": item}
    done = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield {"type": done, "response": response}
