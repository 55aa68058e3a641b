"""A plain `openai` client agent that streams (`stream=True`, usage included): nothing in it knows about roll.

`run(base_url, task)` reads each reply from the stream of `chat.completion.chunk`s, as a chat UI would, and
answers with the text of the last reply; roll trains it through its training proxy (docs/openai_agent.md).
"""

from __future__ import annotations

from openai import OpenAI


def run(base_url: str, task: dict) -> dict:
    """Play one task in up to 2 streamed calls; returns {"answer": ...} for the caller to check."""
    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    choices = ", ".join(task.get("actions") or []) or "any text"
    messages = [
        {"role": "system", "content": f"Answer with one of: {choices}, as <answer>X</answer>."},
        {"role": "user", "content": task["prompt"]},
    ]
    text = ""
    for _ in range(2):
        stream = client.chat.completions.create(
            model="policy",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            stop=["</answer>"],
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        if "<answer>" in text:
            break
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Answer as <answer>X</answer>."},
        ]
    return {"answer": text.split("<answer>")[-1].strip()}
