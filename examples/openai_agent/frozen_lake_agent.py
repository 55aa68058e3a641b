"""An ordinary OpenAI-client agent with a tool that acts on its world: nothing in it knows about roll.

`run(base_url, task)` walks a FrozenLake board: it shows the model the board, the model calls
`move(direction)`, the agent posts the move to the task's `step_url` (the world's HTTP endpoint,
`{"action": ...}` in, `{"observation", "done", ...}` out) and shows the model the next board, until the
world says done, the model answers without a tool call, or `MAX_MOVES` moves were made. Each call sends only the instruction and the current board:
the board says everything a move needs, and the prompts stay short. roll trains it by handing it a
per-episode base_url and step_url (examples/openai_agent/README.md).
"""

from __future__ import annotations

import json
import urllib.request

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "description": "Move one square on the lake.",
            "parameters": {
                "type": "object",
                "properties": {"direction": {"type": "string", "enum": ["Left", "Down", "Right", "Up"]}},
                "required": ["direction"],
            },
        },
    }
]
MAX_MOVES = 10


def post(url: str, body: dict) -> dict:
    """POST a JSON body, return the JSON answer."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())


def run(base_url: str, task: dict) -> None:
    """Play one board; the world (`step_url`) keeps the score."""
    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    system = (
        "You walk on a frozen lake: P is you, _ is ice, O is a hole, G is the goal. Reach G without falling"
        " into a hole. Call the move tool with one direction."
    )
    board = task["prompt"]
    for _ in range(MAX_MOVES):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": board}]
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        calls = reply.choices[0].message.tool_calls
        if not calls:  # a reply without a tool call is the model's last word, as in any agent loop
            return None
        try:
            direction = str(json.loads(calls[0].function.arguments)["direction"])
        except (json.JSONDecodeError, KeyError, TypeError):
            direction = ""  # the world answers a move that is not one as it does
        world = post(task["step_url"], {"action": direction})
        if world["done"]:
            return None
        board = world["observation"]
    return None


if __name__ == "__main__":
    import sys

    print(run(sys.argv[1], {"prompt": sys.argv[2], "step_url": sys.argv[3]}))
