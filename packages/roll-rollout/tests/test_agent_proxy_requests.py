"""What the training proxy does with each request it is sent: fields that would change sampling are refused by
name, `stop` ends the reply and the recorded ids, `tool_choice: none` offers no tools, the Responses API and
streamed chat are the same calls in other wire formats. Plain urllib against a proxy with a scripted policy
(no model, no pipeline); tests/test_openai_agent.py runs the real `openai` client and the frameworks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from roll_rollout import SamplingSettings
from roll_rollout.policies.agent_proxy import AgentProxy, AgentSession
from roll_rollout.testing import ScriptedPolicy

TOOLS = [
    {"type": "function", "function": {"name": "submit", "parameters": {"type": "object", "properties": {}}}}
]
USER = [{"role": "user", "content": "go"}]
SAMPLING = SamplingSettings(max_new_tokens=16, temperature=1.0, top_p=1.0)


class RecordingPolicy(ScriptedPolicy):
    """Keeps its requests and answers with distinct log-probs (a test sees which were kept)."""

    def __init__(self, ids: list[int]) -> None:
        super().__init__(ids, record=True)

    async def generate(self, request: Any) -> Any:
        result = await super().generate(request)
        return type(result)(
            result.output_ids, [-0.1 * (i + 1) for i in range(len(result.output_ids))], "stop", 0
        )


@pytest.fixture(scope="module")
def proxy(chat_tokenizer) -> Iterator[tuple[AgentProxy, asyncio.AbstractEventLoop]]:
    """One proxy for the module (stopping one waits out its poll interval), its policy on a loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    served = AgentProxy(chat_tokenizer)
    yield served, loop
    served.stop()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@contextmanager
def served(
    proxy: tuple[AgentProxy, asyncio.AbstractEventLoop], policy: Any
) -> Iterator[tuple[str, AgentSession]]:
    """(base_url, session) of one episode of `policy` on the module's proxy."""
    server, loop = proxy
    session = AgentSession(policy, loop, SAMPLING, 8, 4096, lambda i: i)
    url = server.open(session)
    try:
        yield url, session
    finally:
        server.close_session(url)


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    """(status, body text) of a POST; an HTTP error's status and body too."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(
    ("field", "says"),
    [
        ({"temperature": 0.2}, "temperature=0.2 differs from the run's temperature=1"),
        ({"top_p": 0.5}, "top_p=0.5 differs from the run's top_p=1"),
        ({"presence_penalty": 0.5}, "presence_penalty=0.5 is not supported"),
        ({"logit_bias": {"5": 10}}, "logit_bias={'5': 10} is not supported"),
        ({"seed": 3}, "seed=3 is not supported"),
        ({"response_format": {"type": "json_object"}}, "response_format="),
        ({"n": 2}, "n=2 is not supported: each call trains as one row"),
        ({"tool_choice": "required"}, "tool_choice='required' cannot be guaranteed"),
        ({"max_tokens": 100}, "max_tokens=100 is more than the run's 16 new tokens a call"),
        ({"max_completion_tokens": 0}, "max_completion_tokens must be a positive integer, got 0"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop must be"),
        ({"frobnicate": 1}, "does not know the field(s) ['frobnicate']"),
    ],
)
def test_a_field_roll_cannot_honour_is_refused_by_name(proxy, chat_tokenizer, field: dict, says: str) -> None:
    policy = RecordingPolicy([5])
    with served(proxy, policy) as (url, session):
        status, text = post(f"{url}/chat/completions", {"messages": USER, "tools": TOOLS, **field})
    assert status == 400, text
    assert says in json.loads(text)["error"]["message"]
    assert policy.seen == [] and session.refused is None  # refused before sampling; the episode goes on


def test_defaults_frameworks_send_are_served(proxy, chat_tokenizer) -> None:
    """Nulls, the run's own values and fields that change nothing are accepted (frameworks send them)."""
    body = {
        "model": "gpt-4o",
        "messages": USER,
        "temperature": 1.0,
        "top_p": None,
        "n": 1,
        "stream": False,
        "presence_penalty": 0,
        "store": False,
        "parallel_tool_calls": True,
        "user": "u",
        "metadata": {"k": "v"},
        "max_tokens": 16,
    }
    with served(proxy, RecordingPolicy([5])) as (url, session):
        status, text = post(f"{url}/chat/completions", body)
        assert status == 200, text
        status, text = post(f"{url}/responses", {"input": "go", "include": [], "truncation": "disabled"})
        assert status == 200, text
    assert len(session.ordered_calls()) == 2


@pytest.mark.parametrize(("stop", "kept"), [("</answer>", 3), (["Down", "Up"], 4)])
def test_stop_ends_the_reply_and_the_recorded_ids_at_the_token_completing_it(
    proxy, chat_tokenizer, stop: Any, kept: int
) -> None:
    ids = chat_tokenizer.encode("<answer>Left</answer>UpDown", add_special_tokens=False)
    assert len(ids) == 5
    with served(proxy, RecordingPolicy(ids)) as (url, session):
        status, text = post(f"{url}/chat/completions", {"messages": USER, "stop": stop})
    assert status == 200, text
    choice = json.loads(text)["choices"][0]
    call = session.ordered_calls()[0]
    assert call.result.output_ids == ids[:kept]  # what trains: the ids up to the stop, none after it
    assert call.result.log_probs == pytest.approx([-0.1 * (i + 1) for i in range(kept)])
    whole = chat_tokenizer.decode(ids[:kept])
    stop_text = stop if isinstance(stop, str) else "Up"
    assert choice["message"]["content"] == whole[: whole.index(stop_text)]  # the stop string is not answered
    assert choice["finish_reason"] == "stop"


def test_tool_choice_none_offers_no_tools(proxy, chat_tokenizer) -> None:
    policy = RecordingPolicy(chat_tokenizer.encode("Left", add_special_tokens=False))
    with served(proxy, policy) as (url, _):
        post(f"{url}/chat/completions", {"messages": USER})
        status, text = post(
            f"{url}/chat/completions", {"messages": USER, "tools": TOOLS, "tool_choice": "none"}
        )
        post(f"{url}/chat/completions", {"messages": USER, "tools": TOOLS, "tool_choice": "auto"})
    assert status == 200, text
    without, none, auto = (r.prompt_ids for r in policy.seen)
    assert none == without != auto


def test_a_responses_call_is_the_prompt_of_the_same_chat(proxy, chat_tokenizer) -> None:
    policy = RecordingPolicy(chat_tokenizer.encode("Left", add_special_tokens=False))
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "submit", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "Left"},
    ]
    chat = [
        {"role": "system", "content": "you are on a lake"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "submit"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Left"},
    ]
    flat = [{"type": "function", "name": "submit", "parameters": {"type": "object", "properties": {}}}]
    with served(proxy, policy) as (url, _):
        body = {"instructions": "you are on a lake", "input": history, "tools": flat}
        status, text = post(f"{url}/responses", body)
        post(f"{url}/chat/completions", {"messages": chat, "tools": TOOLS})
    assert status == 200, text
    assert policy.seen[0].prompt_ids == policy.seen[1].prompt_ids
    response = json.loads(text)
    assert response["object"] == "response" and response["status"] == "completed"
    (item,) = response["output"]
    assert item["type"] == "message" and item["content"][0] == {
        "type": "output_text",
        "text": "Left",
        "annotations": [],
    }


def test_tool_calls_are_function_call_output_items() -> None:
    from roll_rollout.policies.openai_responses import response_object

    call = {"id": "call_1", "type": "function", "function": {"name": "submit", "arguments": '{"x": 1}'}}
    message = {"role": "assistant", "content": "Sure.", "tool_calls": [call]}
    response = response_object({}, "m", message, "tool_calls", 7, ["a", "b"], None)
    text, fn = response["output"]
    assert text["type"] == "message" and text["content"][0]["text"] == "Sure."
    assert {k: fn[k] for k in ("type", "call_id", "name", "arguments")} == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "submit",
        "arguments": '{"x": 1}',
    }
    assert response["usage"]["input_tokens"] == 7 and response["usage"]["output_tokens"] == 2
    cut = response_object({}, "m", {"role": "assistant", "content": "Le"}, "length", 7, ["a"], None)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}


def _events(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n\n")
    out = []
    for block in text.strip().split("\n\n"):
        data = [line[len("data: ") :] for line in block.split("\n") if line.startswith("data: ")]
        out.append({"done": True} if data == ["[DONE]"] else json.loads(data[0]))
    return out


def test_a_streamed_chat_is_the_same_reply_as_server_sent_chunks(proxy, chat_tokenizer) -> None:
    ids = chat_tokenizer.encode("LeftUp", add_special_tokens=False)
    with served(proxy, RecordingPolicy(ids)) as (url, session):
        _, whole = post(f"{url}/chat/completions", {"messages": USER, "logprobs": True})
        body = {"messages": USER, "stream": True, "stream_options": {"include_usage": True}, "logprobs": True}
        status, text = post(f"{url}/chat/completions", body)
    assert status == 200
    *chunks, usage, done = _events(text)
    assert done == {"done": True} and usage["choices"] == [] and usage["usage"] == json.loads(whole)["usage"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert (
        content
        == json.loads(whole)["choices"][0]["message"]["content"]
        == chat_tokenizer.decode(ids, skip_special_tokens=True)
    )
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    streamed = [lp for c in chunks for lp in ((c["choices"][0].get("logprobs") or {}).get("content") or [])]
    assert [x["logprob"] for x in streamed] == pytest.approx([-0.1, -0.2])
    assert len(session.ordered_calls()) == 2


def test_a_streamed_response_ends_with_the_whole_response(proxy, chat_tokenizer) -> None:
    with served(proxy, RecordingPolicy(chat_tokenizer.encode("Left", add_special_tokens=False))) as (
        url,
        _,
    ):
        status, text = post(f"{url}/responses", {"input": "go", "stream": True})
    assert status == 200
    events = _events(text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    assert delta["delta"] == "Left" == events[-1]["response"]["output"][0]["content"][0]["text"]


def test_agents_connecting_while_the_accept_loop_waits_are_queued_not_reset(chat_tokenizer) -> None:
    """On a loaded machine the proxy's accept loop waits (for the GIL) while every episode's agent connects at
    once: each connection waits in the listen queue. The stdlib's queue of 5 reset 27 of 40 in one second,
    the ConnectionResetError of failed SmolLM2 validation episodes."""
    server = AgentProxy(chat_tokenizer)
    server._http.shutdown()  # the accept loop stops; the socket goes on listening
    answers: list[Any] = []

    def connect() -> None:
        try:  # answered 404: no open episode of that key
            answers.append(post(f"{server.root}/ep-none/chat/completions", {"messages": USER})[0])
        except OSError as exc:
            answers.append(type(exc).__name__)

    clients = [threading.Thread(target=connect) for _ in range(40)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    threading.Thread(target=server._http.serve_forever, daemon=True).start()
    for client in clients:
        client.join()
    server.stop()
    assert answers == [404] * 40
