"""Why an `openai_agent` episode ended (`end/<kind>`) and whether the proxy read each reply in full
(`action_is_valid`): one scripted episode per kind over four_choice, its agent written with urllib; the
expected kind is the case's, read off what the agent and the policy were scripted to do."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from roll_rollout.hosting.agent_ends import END_KINDS
from roll_rollout.testing import ScriptedPolicy

HERE = Path(__file__).resolve()
DOCS = HERE.parents[3] / "docs" / "openai_agent.md"
SUBMIT = [
    {
        "type": "function",
        "function": {
            "name": "submit",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>{"name": "submit", "arguments": {"answer": "B"}}</tool_call>'
PROSE = "I think it is B."
BROKEN = '<tool_call>{"name": "submit", "arguments": </tool_call>'  # the JSON does not read
UNKNOWN = '<tool_call>{"name": "jump", "arguments": {}}</tool_call>'  # a tool the request did not offer
HEALTHY = ("done", "answered", "no_tool_call", "bad_tool_call", "agent_stopped", "truncated")


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST JSON, the JSON answer; urllib raises on an HTTP error, as an agent's client does."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _ask(base_url: str, task: dict, **fields: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": task["prompt"]}], **fields}
    return _post(f"{base_url}/chat/completions", body)["choices"][0]["message"]


def submits(base_url: str, task: dict) -> None:
    """A tool agent: one call offering `submit`; a `submit` call steps the task env with its answer."""
    message = _ask(base_url, task, tools=SUBMIT)
    for call in message.get("tool_calls") or []:
        if call["function"]["name"] == "submit":
            _post(task["step_url"], {"action": json.loads(call["function"]["arguments"])["answer"]})


def asks_once(base_url: str, task: dict) -> None:
    _ask(base_url, task)


def answers(base_url: str, task: dict) -> dict:
    _ask(base_url, task)
    return {"answer": "B"}


def loops_forever(base_url: str, task: dict) -> None:
    while True:
        _ask(base_url, task)


def raises(base_url: str, task: dict) -> None:
    _ask(base_url, task)
    raise RuntimeError("agent bug")


def sends_a_refused_field(base_url: str, task: dict) -> None:
    _ask(base_url, task, temperature=0.2)  # the run samples at 1: HTTP 400, which the client raises


def never_calls(base_url: str, task: dict) -> float:
    return 1.0


def returns_a_list(base_url: str, task: dict) -> list:
    _ask(base_url, task)
    return [1]


def sleeps(base_url: str, task: dict) -> None:
    time.sleep(2.0)


class FailingPolicy:
    async def generate(self, request: Any) -> Any:
        raise RuntimeError("the policy server is down")


CASES = [  # (kind, agent, the policy's reply, play options)
    ("done", "submits", CALL, {}),
    ("answered", "answers", PROSE, {}),
    ("no_tool_call", "submits", PROSE, {}),
    ("bad_tool_call", "submits", BROKEN, {}),
    ("agent_stopped", "asks_once", PROSE, {}),
    ("truncated", "loops_forever", PROSE, {"max_turns": 2}),
    ("agent_raised", "raises", PROSE, {}),
    ("proxy_refused", "sends_a_refused_field", PROSE, {}),
    ("no_call", "never_calls", PROSE, {}),
    ("bad_outcome", "returns_a_list", PROSE, {}),
    ("agent_timeout", "sleeps", PROSE, {"timeout_s": 0.3}),
    ("env_failed", "answers", PROSE, {"demonstrate": True}),  # the tag names no demonstration_tool
    ("policy_error", "asks_once", None, {}),
]


@pytest.mark.parametrize(("kind", "agent", "reply", "options"), CASES, ids=[c[0] for c in CASES])
def test_each_episode_says_in_its_metrics_how_it_ended(
    char_tokenizer, play_agent, kind: str, agent: str, reply: str | None, options: dict
) -> None:
    policy = (
        FailingPolicy()
        if reply is None
        else ScriptedPolicy(char_tokenizer.encode(reply, add_special_tokens=False))
    )
    traj = play_agent(char_tokenizer, f"{HERE}:{agent}", policy, max_new_tokens=96, **options)
    ends = {k: v for k, v in traj.metrics.items() if k.startswith("end/")}
    assert ends == {f"end/{k}": float(k == kind) for k in END_KINDS}, (traj.error, ends)
    assert (traj.error is None) == (kind in HEALTHY), traj.error
    assert kind != "done" or traj.success  # the task env checked B, right for seed 0


def test_every_kind_has_a_case_and_a_line_in_the_docs() -> None:
    assert sorted(c[0] for c in CASES) == sorted(END_KINDS)
    docs = DOCS.read_text()
    assert [k for k in END_KINDS if f"| `{k}` |" not in docs] == []


@pytest.mark.parametrize(
    ("reply", "read"),
    [(CALL, "tool_call"), (PROSE, "no_tool_call"), (BROKEN, "bad_tool_call"), (UNKNOWN, "bad_tool_call")],
)
def test_action_is_valid_says_whether_the_proxy_read_the_reply_in_full(
    char_tokenizer, play_agent, reply: str, read: str
) -> None:
    policy = ScriptedPolicy(char_tokenizer.encode(reply, add_special_tokens=False))
    traj = play_agent(char_tokenizer, f"{HERE}:submits", policy, max_new_tokens=96)
    valid = read != "bad_tool_call"
    assert [t.action_is_valid for t in traj.turns] == [valid]
    assert traj.metrics["action_is_valid"] == float(valid)
    assert traj.metrics.get(f"reply/{read}") == 1.0


def test_a_reply_reads_as_tool_calls_only_when_every_call_reads_and_names_an_offered_tool() -> None:
    from roll_rollout.policies.agent_proxy import read_reply

    two = '<tool_call>{"name": "submit", "arguments": {}}</tool_call><tool_call>{"name": "submit"'
    assert read_reply(CALL, SUBMIT) == "tool_call"
    assert read_reply(two, SUBMIT) == "bad_tool_call"  # the first read, the second did not
    assert read_reply('{"name": "submit", "arguments": {"answer": "B"}}', SUBMIT) == "tool_call"
    assert read_reply("The lake is {cold}.", SUBMIT) == "bad_tool_call"  # braces read as a call attempt
    assert read_reply(CALL, None) == "text"  # no tools offered: text, whatever it says
