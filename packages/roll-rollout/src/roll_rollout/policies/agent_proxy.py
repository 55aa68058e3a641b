"""The training proxy: an OpenAI-compatible endpoint per episode in front of the run's policy.

An `openai_agent` tag's agent is ordinary code speaking the OpenAI API. Each of its episodes gets a
`base_url` of its own, `http://127.0.0.1:PORT/v1/<episode key>`; a `POST .../chat/completions` there is
rendered to prompt ids (`roll_rollout.policies.openai_chat.chat_prompt_ids`, tools included), sampled by the same
`PolicyClient` the env slots use (token ids in, token ids and log-probs out, under the run's sampling
settings) and recorded in the episode's `AgentSession`: the prompt ids exactly as sent, the sampled ids
and their log-probs. Those records are what trains (`roll_rollout.hosting.agent_manager`); the text the agent
sees is only ever decoded from them, never encoded back.

It serves what agent frameworks send: `POST .../chat/completions` and `POST .../responses` (the Responses
API, `roll_rollout.policies.openai_responses`: rendered to the same prompt as the same conversation in chat form),
either with `stream: true` (server-sent events, `roll_rollout.policies.openai_stream`: the reply is sampled whole,
then sent as the events a streaming server sends), and `GET .../models`. `POST .../env/step` with
`{"action": <text>}` is the agent's tools acting on the episode's task env (the session's `step_env`, on
the env worker's loop): it answers the env's observation, reward and whether the episode is done. Every request field is honoured,
inert, or refused with HTTP 400 naming it (`roll_rollout.policies.openai_fields`): sampling is the run's, so that the
agent samples what training assumes. A request's `stop` cuts the reply at the first stop string; the ids
after the token that completed it are neither answered nor recorded (`cut_at_stop`).

One proxy serves every slot of an env worker (`json_http.JsonHttpServer`, loopback only). Requests to
an unknown or closed key get HTTP 404; a call beyond the episode's call budget or context gets HTTP 400
(`context_length_exceeded`) and marks the session `refused`; a failed generation gets HTTP 500 and marks
it `policy_error`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any

from roll_rollout.policies.json_http import HttpError, JsonHttpServer, JsonRequestHandler
from roll_rollout.policies.openai_chat import (
    ChatRequestError,
    assistant_message,
    chat_completion,
    chat_prompt_ids,
    read_tool_calls,
)
from roll_rollout.policies.openai_fields import CHAT_FIELDS, RESPONSES_FIELDS, CallOptions, call_options
from roll_rollout.policies.openai_responses import response_object, responses_chat
from roll_rollout.policies.openai_stream import chat_stream, response_stream
from roll_rollout.policies.policy import GenerateRequest, GenerateResult, PolicyClient, SamplingSettings
from roll_rollout.prompts import ChatTokenizer

MODEL_NAME = "roll-policy"
"""The model id the proxy lists and answers with (any `model` in a request is accepted)."""
_MODEL = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "roll"}
REPLY_READS = ("text", "tool_call", "no_tool_call", "bad_tool_call")
"""How the proxy read a sampled reply (`read_reply`); roll_rollout.hosting.agent_ends says what each means."""


@dataclass(frozen=True)
class RecordedCall:
    """One chat.completions call of an episode: what the policy was given and what it sampled."""

    prompt_ids: list[int]
    result: GenerateResult
    text: str  # the sampled ids decoded (special tokens skipped): what the agent was answered
    last_message: str  # the request's last message text: the observation the call acted on
    read: str = "text"  # how the reply was read, one of REPLY_READS


@dataclass
class AgentSession:
    """One episode's calls through the proxy; `sample_key(i)` is the random stream of its i-th call."""

    policy: PolicyClient
    loop: asyncio.AbstractEventLoop  # where `policy.generate` runs (the env worker's loop)
    sampling: SamplingSettings
    max_calls: int
    max_context_tokens: int
    sample_key: Callable[[int], int]
    calls: dict[int, RecordedCall] = field(default_factory=dict)
    refused: str | None = None  # why a call was refused (the episode is then truncated)
    policy_error: str | None = None
    rejected: str | None = None  # the first HTTP 4xx error a request of the agent was answered with
    step_env: Callable[[str], Awaitable[dict[str, Any]]] | None = None  # `POST .../env/step`; None: 404
    _issued: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reserve(self) -> int:
        """The next call's index, or `HttpError` past the episode's call budget."""
        with self._lock:
            index, self._issued = self._issued, self._issued + 1
        if index >= self.max_calls:
            self.refused = f"the agent made more than {self.max_calls} calls (max_actions_per_traj)"
            raise HttpError(400, f"{self.refused}; the episode ends here", "context_length_exceeded")
        return index

    def record(self, index: int, call: RecordedCall) -> None:
        with self._lock:
            self.calls[index] = call

    def ordered_calls(self) -> list[RecordedCall]:
        """The recorded calls in the order they were made."""
        with self._lock:
            return [self.calls[i] for i in sorted(self.calls)]


class AgentProxy:
    """The OpenAI-compatible proxy of one env worker (see the module docstring); `open` a session per episode."""

    def __init__(
        self, tokenizer: ChatTokenizer, *, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 600.0
    ) -> None:
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self._sessions: dict[str, AgentSession] = {}
        self._lock = threading.Lock()
        self.tokenizer_lock = threading.Lock()  # held to use `tokenizer`: a fast one is not thread-safe
        self._http = JsonHttpServer((host, port), _handler_class(self))
        self._thread = threading.Thread(target=self._http.serve_forever, name="agent-proxy", daemon=True)
        self._thread.start()

    @property
    def root(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}/v1"

    def open(self, session: AgentSession) -> str:
        """Register `session`; returns its `base_url` (the root followed by a fresh, unguessable key)."""
        key = f"ep-{secrets.token_hex(8)}"
        with self._lock:
            self._sessions[key] = session
        return f"{self.root}/{key}"

    def close_session(self, base_url: str) -> None:
        """Stop serving `base_url`: later calls get 404."""
        with self._lock:
            self._sessions.pop(base_url.rsplit("/", 1)[-1], None)

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    # ------------------------------------------------------------------ requests
    def note_rejected(self, key: str, exc: HttpError) -> None:
        """Keep the first 4xx error a request to `key`'s open session was answered with (why an agent raised)."""
        with self._lock:
            found = self._sessions.get(key)
        if found is not None and 400 <= exc.status < 500 and found.rejected is None:
            found.rejected = f"HTTP {exc.status}: {exc}"

    def session(self, key: str) -> AgentSession:
        with self._lock:
            found = self._sessions.get(key)
        if found is None:
            raise HttpError(
                404, f"no open episode {key!r}: the episode ended or the base_url is not one roll gave"
            )
        return found

    def chat(self, key: str, body: dict[str, Any]) -> dict[str, Any] | str:
        """The chat.completion reply to `body` (an SSE body when it streams), recorded in the session of `key`."""
        session = self.session(key)
        options = _options(body, CHAT_FIELDS, session.sampling)
        reply = self._sample(session, body.get("messages"), body.get("tools"), options)
        completion = chat_completion(
            MODEL_NAME, reply.message, reply.finish, reply.prompt_len, reply.tokens, reply.log_probs
        )
        return chat_stream(completion, options.include_usage) if options.stream else completion

    def responses(self, key: str, body: dict[str, Any]) -> dict[str, Any] | str:
        """The Responses API reply to `body` (an SSE body when it streams), recorded in the session of `key`."""
        session = self.session(key)
        options = _options(body, RESPONSES_FIELDS, session.sampling)
        try:
            messages, tools = responses_chat(body)
        except ChatRequestError as exc:
            raise HttpError(400, str(exc)) from exc
        reply = self._sample(session, messages, tools, options)
        response = response_object(
            body, MODEL_NAME, reply.message, reply.finish, reply.prompt_len, reply.tokens, reply.log_probs
        )
        return response_stream(response) if options.stream else response

    def env_step(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """The session's task env stepped with `body["action"]`: `{observation, reward, done, success}`."""
        session = self.session(key)
        if session.step_env is None:
            raise HttpError(404, "this episode has no task env to step")
        if set(body) != {"action"} or not isinstance(body["action"], str):
            raise HttpError(400, f'env/step takes {{"action": <text>}}; got {json.dumps(body)[:200]}')
        future = asyncio.run_coroutine_threadsafe(session.step_env(body["action"]), session.loop)
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeout as exc:
            future.cancel()
            raise HttpError(504, f"the task env's step took longer than {self.timeout_s} s") from exc

    def _sample(self, session: AgentSession, messages: Any, tools: Any, options: CallOptions) -> _Reply:
        """Render, sample and record one call; the reply's assistant message (tool calls read back)."""
        tools = tools if options.offer_tools else None
        try:
            with self.tokenizer_lock:
                prompt_ids = chat_prompt_ids(self.tokenizer, messages, tools)
        except ChatRequestError as exc:
            raise HttpError(400, str(exc)) from exc
        index = session.reserve()
        request = GenerateRequest(
            prompt_ids, _sampling(session, options, len(prompt_ids)), None, session.sample_key(index)
        )
        future = asyncio.run_coroutine_threadsafe(session.policy.generate(request), session.loop)
        try:
            result = future.result(timeout=self.timeout_s)
        except FutureTimeout as exc:
            future.cancel()
            session.policy_error = f"generation took longer than {self.timeout_s} s"
            raise HttpError(504, session.policy_error) from exc
        except Exception as exc:
            session.policy_error = f"{type(exc).__name__}: {exc}"
            raise HttpError(500, session.policy_error) from exc
        with self.tokenizer_lock:
            result, text = cut_at_stop(self.tokenizer, result, options.stop)
            tokens = [self.tokenizer.decode([t], skip_special_tokens=False) for t in result.output_ids]
        last = messages[-1].get("content")
        read = read_reply(text, tools)
        session.record(
            index, RecordedCall(prompt_ids, result, text, last if isinstance(last, str) else "", read)
        )
        message, called = assistant_message(text, tools)
        finish = "tool_calls" if called else result.finish_reason
        return _Reply(
            message, finish, len(prompt_ids), tokens, result.log_probs if options.logprobs else None
        )


@dataclass(frozen=True)
class _Reply:
    """A sampled call as both endpoints answer it."""

    message: dict[str, Any]
    finish: str
    prompt_len: int
    tokens: list[str]  # each sampled id decoded
    log_probs: list[float] | None  # when the request asked for them


def read_reply(text: str, tools: Any) -> str:
    """How the proxy reads a reply `text` to a request offering `tools` (one of REPLY_READS)."""
    if not tools:
        return "text"
    found, calls, complete = read_tool_calls(text)
    if found is None:
        return "no_tool_call"
    offered = {(t.get("function") or {}).get("name") for t in tools}
    return "tool_call" if complete and calls and all(c.name in offered for c in calls) else "bad_tool_call"


def _options(body: dict[str, Any], fields: dict[str, Any], sampling: SamplingSettings) -> CallOptions:
    try:
        return call_options(body, fields, sampling)
    except ChatRequestError as exc:
        raise HttpError(400, str(exc)) from exc


def cut_at_stop(
    tokenizer: ChatTokenizer, result: GenerateResult, stops: tuple[str, ...]
) -> tuple[GenerateResult, str]:
    """(the result up to the token that completes the first stop string, the text before that string).

    Sampling runs on under the run's settings; what the request's `stop` cut off is neither answered nor
    recorded, so it never trains: a token sampled after the stop was never part of the reply. The kept
    ids' log-probs are the sampled ones (a token's probability does not depend on what followed it).
    """
    text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
    found = [(at, s) for s in stops if (at := text.find(s)) >= 0]
    if not found:
        return result, text
    at = min(found)[0]
    end = next(
        n
        for n in range(1, len(result.output_ids) + 1)
        if any(s in tokenizer.decode(result.output_ids[:n], skip_special_tokens=True) for s in stops)
    )
    kept = GenerateResult(result.output_ids[:end], result.log_probs[:end], "stop", result.policy_version)
    return kept, text[:at]


def _sampling(session: AgentSession, options: CallOptions, prompt_len: int) -> SamplingSettings:
    """The run's sampling, its token budget lowered by the request's and by the room left in the context."""
    budget = session.max_context_tokens - prompt_len
    if budget <= 0:
        session.refused = (
            f"a prompt of {prompt_len} tokens leaves no room in sequence_length={session.max_context_tokens}"
        )
        raise HttpError(400, session.refused, "context_length_exceeded")
    limit = min(session.sampling.max_new_tokens, budget, options.max_tokens or budget)
    return replace(session.sampling, max_new_tokens=limit)


def _handler_class(proxy: AgentProxy) -> type[JsonRequestHandler]:
    class Handler(JsonRequestHandler):
        def _route(self) -> tuple[str, str]:
            """(episode key, the rest of the path) of /v1/<key>/<rest>."""
            parts = self.path.split("?", 1)[0].strip("/").split("/", 2)
            if len(parts) < 3 or parts[0] != "v1":
                return "", ""
            return parts[1], parts[2]

        def do_GET(self) -> None:
            key, rest = self._route()
            try:
                proxy.session(key)
                if rest == "models":
                    self.send_json(200, {"object": "list", "data": [_MODEL]})
                elif rest == f"models/{MODEL_NAME}":
                    self.send_json(200, _MODEL)
                else:
                    raise HttpError(404, f"no route GET {self.path}; the proxy serves <base_url>/models")
            except HttpError as exc:
                proxy.note_rejected(key, exc)
                self.send_http_error(exc)

        def do_POST(self) -> None:
            key, rest = self._route()
            try:
                serve = {
                    "chat/completions": proxy.chat,
                    "responses": proxy.responses,
                    "env/step": proxy.env_step,
                }.get(rest)
                if serve is None:
                    raise HttpError(
                        404,
                        f"no route POST {self.path}; the proxy serves <base_url>/chat/completions, "
                        "<base_url>/responses and <base_url>/env/step",
                    )
                self.send_answer(serve(key, self.read_json_object()))
            except HttpError as exc:
                proxy.note_rejected(key, exc)
                self.send_http_error(exc)
            except Exception as exc:  # a bug must answer the agent, not hang it
                self.send_http_error(HttpError(500, f"{type(exc).__name__}: {exc}"))

    return Handler
