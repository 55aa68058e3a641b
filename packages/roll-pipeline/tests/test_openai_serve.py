"""`OpenAIPolicy` against a live OpenAI-compatible server (`roll serve`'s, serving the project's tiny HF
model over real HTTP), against a server that stalls and one that answers garbage.

The reference for what the server returns is the HF inference worker called directly, not the client.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_pipeline.serving.openai_server import OpenAICompatibleServer
from roll_rollout import (
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    GenerateRequest,
    RolloutScheduler,
    SamplingSettings,
    SchedulerSettings,
    WorkerLink,
    failure_kind,
)
from roll_rollout.policies.openai_policy import OpenAIPolicy, OpenAISettings, PolicyServerError

GREEDY = SamplingSettings(max_new_tokens=12, greedy=True)
INSTRUCTION = "You are solving FrozenLake."


@pytest.fixture(scope="module")
def served():
    model = resolve_pretrain("builtin:tiny-frozen-lake")
    backend = PolicyServer(model, seed=0, num_threads=1, stop_strings=["</answer>"])
    tokenizer = backend.worker.strategy.tokenizer
    with OpenAICompatibleServer(backend.policy, tokenizer, "tiny") as server:
        yield server, backend, tokenizer


def _policy(url: str, tokenizer: Any = None, **kw: Any) -> OpenAIPolicy:
    settings = dict(base_url=url, model="tiny", api_key_env=None, timeout_s=30.0, backoff_s=0.01)
    return OpenAIPolicy(OpenAISettings(**{**settings, **kw}), tokenizer)


def _prompt(tokenizer: Any, text: str) -> list[int]:
    messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": text}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_completions_return_what_the_model_generates(served):
    server, backend, tokenizer = served
    prompt = _prompt(tokenizer, "Board: start at the top left.")
    direct = asyncio.run(backend.policy.generate(GenerateRequest(prompt, GREEDY)))
    client = _policy(server.url)
    got = asyncio.run(client.generate(GenerateRequest(prompt, GREEDY)))
    assert got.output_ids == direct.output_ids and got.finish_reason == direct.finish_reason
    assert got.log_probs == pytest.approx(direct.log_probs, abs=1e-5)
    assert client.stats == Counter({"requests": 1})


def test_chat_endpoint_applies_the_chat_template_and_without_ids_re_encodes_text(served):
    server, backend, tokenizer = served
    messages = ({"role": "system", "content": INSTRUCTION}, {"role": "user", "content": "Board: go."})
    direct = asyncio.run(backend.policy.generate(GenerateRequest(_prompt(tokenizer, "Board: go."), GREEDY)))
    client = _policy(server.url, tokenizer, endpoint="chat", token_ids_in_response=False)
    assert client.needs_messages
    got = asyncio.run(client.generate(GenerateRequest([], GREEDY, messages)))
    text = tokenizer.decode(direct.output_ids, skip_special_tokens=True)
    assert got.output_ids == tokenizer.encode(text, add_special_tokens=False)


def test_a_rollout_runs_through_the_server(served):
    server, _, tokenizer = served
    client = _policy(server.url, max_concurrency=4)
    batch, scheduler = _rollout(client, tokenizer, count=8)
    assert len(batch) == 8 and all(t.error is None and t.turns for t in batch.trajectories)
    assert client.stats["requests"] == sum(len(t.turns) for t in _played(scheduler)) > 0


def test_a_wrong_model_name_is_a_clear_error_without_retries(served):
    server, _, _ = served
    client = _policy(server.url, model="gpt-9", max_retries=3)
    with pytest.raises(PolicyServerError, match=r"HTTP 404.*'gpt-9' does not exist"):
        asyncio.run(client.generate(GenerateRequest([1, 2, 3], GREEDY)))
    assert client.stats["retries"] == 0 and client.stats["http_404"] == 1


def test_a_stalling_server_times_out_and_is_retried():
    with _FaultyServer(lambda n: "stall") as faulty:
        client = _policy(faulty.url, timeout_s=0.3, max_retries=2)
        with pytest.raises(PolicyServerError, match="failed 3 time"):
            asyncio.run(client.generate(GenerateRequest([1, 2, 3], GREEDY)))
    assert client.stats["timeouts"] == 3 and client.stats["retries"] == 2 and faulty.seen == 3


@pytest.mark.parametrize(
    "garbage", [b"<html>502 Bad Gateway</html>", b'{"choices": []}', b"[1, 2]", b'{"choices": [{"text": 7}]}']
)
def test_a_garbage_answer_is_a_clear_error(garbage):
    with _FaultyServer(lambda n: garbage) as faulty:
        client = _policy(faulty.url, max_retries=1)
        with pytest.raises(PolicyServerError, match="failed 2 time"):
            asyncio.run(client.generate(GenerateRequest([1, 2, 3], GREEDY)))
    assert client.stats["malformed"] == 2


def test_the_run_goes_on_when_a_proxy_garbles_some_answers(served):
    """Every 5th request through a proxy is garbage: exactly those episodes fail, as policy errors,
    and the batch of healthy whole groups still comes."""
    server, _, tokenizer = served
    with _FaultyServer(lambda n: b"garbage" if n % 5 == 4 else "forward", forward_to=server.url) as proxy:
        client = _policy(proxy.url, max_retries=0)
        batch, scheduler = _rollout(client, tokenizer, count=16)
        garbled = proxy.outcomes["garbage"]
    assert len(batch) == 16 and all(t.error is None for t in batch.trajectories)
    failed = [t for t in _played(scheduler) if t.error is not None]
    assert garbled > 0 and len(failed) == garbled == client.stats["malformed"] == client.stats["failed"]
    assert {failure_kind(t) for t in failed} == {"policy_error"}
    assert all("not JSON" in t.error for t in failed)


# ---------------------------------------------------------------------------- helpers
def _rollout(client: OpenAIPolicy, tokenizer: Any, count: int) -> tuple[Any, RolloutScheduler]:
    layout = EnvLayout(count // 4, 4, ("FrozenLake",), (count // 4,), 16)
    workers: list[EnvWorker] = []

    def spawn(w: int) -> WorkerLink:
        slots = [
            EnvSlotSpec(e, "FrozenLake", "frozen_lake", {}, 4, 0, 1024, INSTRUCTION)
            for e in layout.env_ids_of_worker(w)
        ]
        workers.append(EnvWorker(slots, tokenizer, client))
        return WorkerLink.in_process(workers[-1])

    sampling = {"FrozenLake": SamplingSettings(max_new_tokens=8)}
    settings = SchedulerSettings(max_failures_per_group=64, batch_timeout_s=600)
    scheduler = RolloutScheduler(layout, spawn, sampling, seed=3, settings=settings)

    async def run() -> Any:
        try:
            return await scheduler.get_batch(count)
        finally:
            await scheduler.stop()

    batch = asyncio.run(run())
    scheduler.played = list(batch.trajectories) + list(batch.failed)  # type: ignore[attr-defined]
    return batch, scheduler


def _played(scheduler: RolloutScheduler) -> list[Any]:
    return scheduler.played  # type: ignore[attr-defined]


class _FaultyServer:
    """An HTTP server whose n-th POST gets `behaviour(n)`: "stall", "forward" (to a real server), or bytes."""

    def __init__(self, behaviour: Any, forward_to: str | None = None) -> None:
        self.behaviour, self.forward_to = behaviour, forward_to
        self.seen, self.outcomes, self._lock = 0, Counter(), threading.Lock()
        self._stop = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> _FaultyServer:
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer._lock:
                    n, outer.seen = outer.seen, outer.seen + 1
                action = outer.behaviour(n)
                if action == "stall":
                    outer.outcomes["stall"] += 1
                    outer._stop.wait(5)
                    return
                if action == "forward":
                    outer.outcomes["forward"] += 1
                    data = _post(outer.forward_to + self.path.removeprefix("/v1"), json.loads(body))
                else:
                    outer.outcomes["garbage"] += 1
                    data = action
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _post(url: str, body: dict[str, Any]) -> bytes:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def test_server_rejects_bad_requests_with_openai_style_errors(served):
    import urllib.error
    import urllib.request

    server, _, _ = served

    for body, status, needle in [
        ({"model": "tiny", "prompt": []}, 400, "prompt must be"),
        ({"model": "tiny", "prompt": [10**9]}, 400, "outside the vocabulary"),
        ({"model": "tiny", "messages": [{"role": "user"}]}, 400, "messages must be"),
        ({"model": "tiny", "prompt": "hi", "temperature": 9}, 400, "temperature"),
    ]:
        path = "/chat/completions" if "messages" in body else "/completions"
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url + path, body)
        reply = json.loads(err.value.read())
        assert err.value.code == status and needle in reply["error"]["message"], reply
    models = json.loads(urllib.request.urlopen(server.url + "/models", timeout=10).read())
    assert models["data"][0]["id"] == "tiny"


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/completions", "presence_penalty", 0.5),
        ("/completions", "seed", 3),
        ("/completions", "best_of", 2),
        ("/completions", "stream", True),
        ("/chat/completions", "response_format", {"type": "json_object"}),
        ("/chat/completions", "tool_choice", "required"),
        ("/chat/completions", "n", 2),
        ("/chat/completions", "frobnicate", 1),
    ],
)
def test_a_field_that_would_change_sampling_is_refused_by_name(served, path, field, value):
    import urllib.error

    server, _, _ = served
    body = {"model": "tiny", "max_tokens": 4, field: value}
    body |= {"messages": [{"role": "user", "content": "go"}]} if "chat" in path else {"prompt": "go"}
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(server.url + path, body)
    message = json.loads(err.value.read())["error"]["message"]
    assert err.value.code == 400 and field in message, message


def test_serve_honours_stop_and_streams_chat(served):
    server, backend, tokenizer = served
    prompt = _prompt(tokenizer, "Board: go.")
    direct = asyncio.run(backend.policy.generate(GenerateRequest(prompt, GREEDY)))
    text = tokenizer.decode(direct.output_ids, skip_special_tokens=True)
    assert len(text.strip()) >= 2
    stop = text.strip()[1]  # the reply's second character: the stopped reply is what comes before it
    messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": "Board: go."}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0, "stop": [stop]}
    reply = json.loads(_post(server.url + "/chat/completions", body))
    assert reply["choices"][0]["message"]["content"] == text[: text.find(stop)]
    events = _post(server.url + "/chat/completions", {**body, "stream": True}).decode()
    chunks = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert streamed == text[: text.find(stop)] and events.rstrip().endswith("data: [DONE]")
