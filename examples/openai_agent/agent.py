"""An ordinary OpenAI-client agent: nothing in it knows about roll.

`run(base_url, task)` answers a multiple-choice task with tools: it may look at the task again
(`read_task`) and must end with `submit_answer`. roll trains it by handing it a per-episode base_url
(examples/openai_agent/README.md); any other OpenAI-compatible server runs it the same way:

    python examples/openai_agent/agent.py http://127.0.0.1:8000/v1 "The light is red."
"""

from __future__ import annotations

import json
import sys

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_task",
            "description": "Show the task text again.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit_answer",
            "description": "Submit the final answer; this ends the episode.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "one of the allowed answers"}},
                "required": ["answer"],
            },
        },
    },
]
MAX_ROUNDS = 3


def run(base_url: str, task: dict) -> dict:
    """Play one task; returns {"answer": ...} for the caller to check."""
    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    choices = ", ".join(task.get("actions") or []) or "any text"
    messages = [
        {"role": "system", "content": f"Solve the task. Allowed answers: {choices}. Use the tools."},
        {"role": "user", "content": task["prompt"]},
    ]
    for _ in range(MAX_ROUNDS):
        response = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        reply = response.choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            if call.function.name == "submit_answer":
                try:
                    return {"answer": str(json.loads(call.function.arguments).get("answer", "")).strip()}
                except (json.JSONDecodeError, AttributeError):
                    return {"answer": ""}
            result = task["prompt"] if call.function.name == "read_task" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        if not reply.tool_calls:
            messages.append({"role": "user", "content": "Call submit_answer with your answer."})
    return {"answer": (reply.content or "").strip()}


if __name__ == "__main__":
    print(run(sys.argv[1], {"prompt": sys.argv[2], "actions": ["A", "B", "C", "D"]}))
