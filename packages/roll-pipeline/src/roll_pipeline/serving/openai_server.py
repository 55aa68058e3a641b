"""An OpenAI-compatible HTTP server in front of any `PolicyClient` (`roll serve`).

It serves the run's own model (the HF inference worker, requests batched across connections by
`BatchingPolicy`) so that anything speaking the OpenAI API can drive it, and so that `OpenAIPolicy` is
tested against a live server rather than a mock. Endpoints: `GET /v1/models`, `POST /v1/completions`
(prompt as text or token ids) and `POST /v1/chat/completions` (messages and tools through the model's chat
template, tool calls read back from the reply: `roll_rollout.policies.openai_chat`, the rendering the training proxy
of `openai_agent` tags shares). With `return_tokens_as_token_ids` (as in vLLM) log-prob tokens are `token_id:N`.

Every request field is honoured, inert, or refused with HTTP 400 naming it, never ignored: the training
proxy's tables (`roll_rollout.policies.openai_fields`), except that here `temperature`, `top_p` and `max_tokens` are
the request's own (`SERVE_CHAT_FIELDS`, `SERVE_COMPLETION_FIELDS`). `stop` cuts the reply at the first stop
string; a chat request with `stream: true` is answered as server-sent events (sampled whole, then sent).

Standard library only: a `ThreadingHTTPServer` (`json_http.JsonHttpServer`) whose handler threads submit to
one asyncio loop.
Bad requests get HTTP 400 with an OpenAI-style error body; a failed generation gets 500.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from roll_rollout import GenerateRequest, GenerateResult, PolicyClient, SamplingSettings
from roll_rollout.policies.agent_proxy import cut_at_stop
from roll_rollout.policies.json_http import HttpError, JsonHttpServer, JsonRequestHandler
from roll_rollout.policies.openai_chat import (
    ChatRequestError,
    assistant_message,
    chat_completion,
    chat_prompt_ids,
)
from roll_rollout.policies.openai_fields import CHAT_FIELDS, INERT, READ, CallOptions, NoOp, call_options
from roll_rollout.policies.openai_stream import chat_stream

SERVE_CHAT_FIELDS: dict[str, Any] = {
    **CHAT_FIELDS,
    "temperature": READ,
    "top_p": READ,
    "return_tokens_as_token_ids": READ,
}
"""`chat/completions` fields as `roll serve` treats them: the proxy's, sampling the request's own."""

SERVE_COMPLETION_FIELDS: dict[str, Any] = {
    **dict.fromkeys(("model", "user"), INERT),
    **dict.fromkeys(
        ("prompt", "max_tokens", "temperature", "top_p", "logprobs", "stop", "return_tokens_as_token_ids"),
        READ,
    ),
    **{k: CHAT_FIELDS[k] for k in ("n", "presence_penalty", "frequency_penalty", "logit_bias", "seed")},
    "stream": NoOp(False, "roll serve answers a completion whole"),
    "best_of": NoOp(1, "roll serve samples one completion"),
    "echo": NoOp(False, "roll serve answers the completion only"),
    "suffix": NoOp(None, "roll serve does not insert text"),
}
"""`completions` fields as `roll serve` treats them."""
MAX_TOKENS = 65536


class BadRequest(HttpError):
    """The request cannot be served as sent (HTTP 400, or `status`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status, message)


class OpenAICompatibleServer:
    """Serves `policy` under `model_name` at `url` (`/v1/...`) until `stop`."""

    def __init__(
        self,
        policy: PolicyClient,
        tokenizer: Any,
        model_name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout_s: float = 600.0,
    ) -> None:
        self.policy, self.tokenizer, self.model_name = policy, tokenizer, model_name
        self.request_timeout_s = request_timeout_s
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="serve-loop", daemon=True)
        self._http = JsonHttpServer((host, port), _handler_class(self))
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="serve-http", daemon=True)

    @property
    def url(self) -> str:
        """Base URL, ending in /v1."""
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> OpenAICompatibleServer:
        self._loop_thread.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=10)

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests
    def handle(self, path: str, body: dict[str, Any]) -> dict[str, Any] | str:
        """The JSON reply of a POST to `path` (a streamed chat's server-sent events), or `BadRequest`."""
        if body.get("model") not in (None, self.model_name):
            raise BadRequest(
                f"The model {body.get('model')!r} does not exist; this server serves {self.model_name!r}",
                status=404,
            )
        chat = path.endswith("/chat/completions")
        try:
            options = call_options(
                body,
                SERVE_CHAT_FIELDS if chat else SERVE_COMPLETION_FIELDS,
                SamplingSettings(max_new_tokens=MAX_TOKENS),
            )
        except ChatRequestError as exc:
            raise BadRequest(str(exc)) from exc
        prompt_ids = self._chat_prompt(body, options) if chat else self._completion_prompt(body)
        sampling = _sampling(body, options)
        future = asyncio.run_coroutine_threadsafe(
            self.policy.generate(GenerateRequest(prompt_ids, sampling)), self._loop
        )
        try:
            result = future.result(timeout=self.request_timeout_s)
        except FutureTimeout as exc:
            future.cancel()
            raise BadRequest(f"generation took longer than {self.request_timeout_s} s", status=504) from exc
        result, text = cut_at_stop(self.tokenizer, result, options.stop)
        return self._reply(body, result, text, len(prompt_ids), options if chat else None)

    def _completion_prompt(self, body: dict[str, Any]) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and t >= 0 for t in prompt):
            vocab = len(self.tokenizer)
            if max(prompt) >= vocab:
                raise BadRequest(f"prompt token id {max(prompt)} is outside the vocabulary (size {vocab})")
            return list(prompt)
        raise BadRequest("prompt must be a string or a non-empty list of token ids")

    def _chat_prompt(self, body: dict[str, Any], options: CallOptions) -> list[int]:
        tools = body.get("tools") if options.offer_tools else None
        try:
            return chat_prompt_ids(self.tokenizer, body.get("messages"), tools)
        except ChatRequestError as exc:
            raise BadRequest(str(exc)) from exc

    def _reply(
        self,
        body: dict[str, Any],
        result: GenerateResult,
        text: str,
        prompt_len: int,
        chat: CallOptions | None,
    ) -> dict[str, Any] | str:
        """The reply (`chat`: the chat request's options; None for a completion); a streamed chat's events."""
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokens = [
            f"token_id:{t}" if as_ids else self.tokenizer.decode([t], skip_special_tokens=False)
            for t in result.output_ids
        ]
        wants_logprobs = body.get("logprobs") not in (None, False, 0)
        if chat is not None:
            message, called = assistant_message(text, body.get("tools") if chat.offer_tools else None)
            finish = "tool_calls" if called else result.finish_reason
            log_probs = list(result.log_probs) if wants_logprobs else None
            completion = chat_completion(self.model_name, message, finish, prompt_len, tokens, log_probs)
            return chat_stream(completion, chat.include_usage) if chat.stream else completion
        choice: dict[str, Any] = {"index": 0, "finish_reason": result.finish_reason, "text": text}
        if wants_logprobs:
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": list(result.log_probs)}
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": len(result.output_ids),
                "total_tokens": prompt_len + len(result.output_ids),
            },
        }


def _sampling(body: dict[str, Any], options: CallOptions) -> SamplingSettings:
    """The request's sampling: its `max_tokens` (16 when unset, as OpenAI's completions), temperature, top-p."""
    max_tokens = options.max_tokens or 16
    try:
        temperature = 1.0 if body.get("temperature") is None else float(body["temperature"])
        top_p = 1.0 if body.get("top_p") is None else float(body["top_p"])
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"temperature and top_p must be numbers: {exc}") from exc
    if not (0.0 <= temperature <= 2.0 and 0.0 < top_p <= 1.0):
        raise BadRequest("need 0 <= temperature <= 2 and 0 < top_p <= 1")
    greedy = temperature == 0.0
    return SamplingSettings(max_tokens, 1.0 if greedy else temperature, top_p, 0, greedy)


def _handler_class(server: OpenAICompatibleServer) -> type[JsonRequestHandler]:
    class Handler(JsonRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self.send_json(
                    200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]}
                )
            else:
                self.send_http_error(HttpError(404, f"no route GET {self.path}"))

        def do_POST(self) -> None:
            try:
                if self.path.rstrip("/") not in ("/v1/completions", "/v1/chat/completions"):
                    raise HttpError(404, f"no route POST {self.path}")
                self.send_answer(server.handle(self.path.rstrip("/"), self.read_json_object()))
            except HttpError as exc:
                self.send_http_error(exc)
            except Exception as exc:  # a failed generation: the client may retry
                self.send_http_error(HttpError(500, f"{type(exc).__name__}: {exc}"))

    return Handler
