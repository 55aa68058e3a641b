"""A policy served by any OpenAI-compatible HTTP server: vLLM, SGLang, llama.cpp, `roll serve`, an API.

Two endpoints:

- `completions` (default; token-in): the prompt goes as the token ids the env manager built, so the
  server must serve a model with the same tokenizer (a local server of the run's model). The response's
  ids are exact when the server returns them (`return_tokens_as_token_ids`, as vLLM and `roll serve`
  do); otherwise they are the text re-encoded with `tokenizer`.
- `chat` (text-in): the prompt goes as chat messages (system instruction, observations, earlier
  responses, windowed as the env manager's history); for API models with their own tokenizers.
  Response ids are the text re-encoded with `tokenizer`; log-probs are those returned, else 0.

Only the standard library is used (urllib in a bounded thread pool). Each request has a socket timeout
(`timeout_s`); connection errors, timeouts, HTTP 429/5xx and malformed bodies are retried
`max_retries` times with exponential backoff, then raised as `PolicyServerError`: the env manager ends
that episode as a `policy_error` (counted, never trained on) and the rollout goes on. `stats` counts
requests, retries and failures by kind. The API key is read from the environment variable named by
`api_key_env` at request time and never stored or pickled.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from roll_rollout.errors import RolloutError
from roll_rollout.policies.policy import GenerateRequest, GenerateResult
from roll_rollout.prompts import ChatTokenizer

RETRIED_HTTP_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
TOKEN_ID_PREFIX = "token_id:"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_JITTER = random.Random()
"""The retry backoff's jitter: its own generator, not the process-wide one that env calls swap per env."""


class PolicyServerError(RolloutError):
    """An OpenAI-compatible server failed to answer a request usefully after every retry."""


class _Retryable(Exception):
    """One failed attempt that is worth retrying; `kind` names it in `stats`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class OpenAISettings:
    """Where the server is and how hard to try."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str
    endpoint: Literal["completions", "chat"] = "completions"
    api_key_env: str | None = "OPENAI_API_KEY"  # None: send no Authorization header
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 0.5  # first retry's wait; doubles per retry, with jitter
    token_ids_in_response: bool = True  # ask for `return_tokens_as_token_ids` (vLLM, roll serve)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"endpoint must be 'completions' or 'chat', got {self.endpoint!r}")
        if self.max_concurrency < 1 or self.timeout_s <= 0 or self.max_retries < 0 or self.backoff_s < 0:
            raise ValueError(
                "need max_concurrency >= 1, timeout_s > 0, max_retries >= 0 and backoff_s >= 0, got "
                f"{self.max_concurrency}, {self.timeout_s}, {self.max_retries}, {self.backoff_s}"
            )


class OpenAIPolicy:
    """`PolicyClient` over an OpenAI-compatible server (see the module docstring)."""

    def __init__(self, settings: OpenAISettings, tokenizer: ChatTokenizer | None = None) -> None:
        if tokenizer is None and not (settings.endpoint == "completions" and settings.token_ids_in_response):
            raise ValueError(
                "OpenAIPolicy needs a tokenizer to turn response text into ids unless it uses the "
                "completions endpoint with token_ids_in_response=True"
            )
        self.settings = settings
        self.tokenizer = tokenizer
        self.stats: Counter[str] = Counter()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def needs_messages(self) -> bool:
        """The env manager attaches chat messages to requests only for the chat endpoint."""
        return self.settings.endpoint == "chat"

    def __getstate__(self) -> dict[str, Any]:  # sent to env workers: no pool, lock or counters
        return {"settings": self.settings, "tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["tokenizer"])  # type: ignore[misc]

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """POST the request, retrying what is worth retrying; raise `PolicyServerError` at the end."""
        s = self.settings
        body = self._body(request)
        url = f"{s.base_url.rstrip('/')}/{'chat/completions' if s.endpoint == 'chat' else 'completions'}"
        loop = asyncio.get_running_loop()
        self.stats["requests"] += 1
        last: _Retryable | None = None
        for attempt in range(s.max_retries + 1):
            if attempt:
                self.stats["retries"] += 1
                await asyncio.sleep(s.backoff_s * 2 ** (attempt - 1) * (0.5 + _JITTER.random()))
            try:
                reply = await loop.run_in_executor(self._executor(), self._post, url, body)
                return self._result(reply, request)
            except _Retryable as exc:
                self.stats[exc.kind] += 1
                last = exc
        self.stats["failed"] += 1
        raise PolicyServerError(
            f"{url} (model {s.model!r}) failed {s.max_retries + 1} time(s); last: {last}. Check the "
            "server is up and serves this model, or raise timeout_s / max_retries."
        )

    # ------------------------------------------------------------------ request and reply
    def _body(self, request: GenerateRequest) -> dict[str, Any]:
        s, sampling = self.settings, request.sampling
        body: dict[str, Any] = {
            "model": s.model,
            "max_tokens": sampling.max_new_tokens,
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "top_p": 1.0 if sampling.greedy else sampling.top_p,
        }
        if s.endpoint == "chat":
            if request.messages is None:
                raise ValueError("the chat endpoint needs request.messages (set by the env manager)")
            body["messages"] = [dict(m) for m in request.messages]
            body["logprobs"] = True
        else:
            body["prompt"] = list(request.prompt_ids)
            body["logprobs"] = 1
        if s.token_ids_in_response:
            body["return_tokens_as_token_ids"] = True
        return body

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt (in a pool thread): the parsed JSON reply, or `_Retryable`."""
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.settings.api_key_env) if self.settings.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.settings.timeout_s) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode("utf-8", "replace")
            if exc.code in RETRIED_HTTP_STATUS:
                raise _Retryable(f"http_{exc.code}", f"HTTP {exc.code}: {detail}") from exc
            self.stats[f"http_{exc.code}"] += 1
            self.stats["failed"] += 1
            raise PolicyServerError(f"{url} answered HTTP {exc.code} (not retried): {detail}") from exc
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as exc:
            timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc)
            kind = "timeouts" if timed_out else "connection_errors"
            raise _Retryable(kind, f"{type(exc).__name__}: {exc}") from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise _Retryable("malformed", f"reply larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            reply = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _Retryable("malformed", f"reply is not JSON: {raw[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise _Retryable("malformed", f"reply is not a JSON object: {raw[:200]!r}")
        return reply

    def _result(self, reply: dict[str, Any], request: GenerateRequest) -> GenerateResult:
        try:
            choice = reply["choices"][0]
            chat = self.settings.endpoint == "chat"
            text = choice["message"]["content"] if chat else choice["text"]
            if not isinstance(text, str):
                raise TypeError(f"text is {type(text).__name__}")
            tokens, log_probs = _logprob_entries(choice.get("logprobs"), chat)
            reason = str(choice.get("finish_reason") or "stop")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise _Retryable("malformed", f"unexpected reply shape ({exc}): {str(reply)[:300]}") from exc
        ids = _token_ids(tokens)
        if ids is None:
            if self.tokenizer is None:
                raise _Retryable("malformed", "the server returned no token ids and there is no tokenizer")
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            log_probs = log_probs if len(log_probs) == len(ids) else [0.0] * len(ids)
        ids, log_probs = ids[: request.sampling.max_new_tokens], log_probs[: request.sampling.max_new_tokens]
        return GenerateResult(ids, log_probs, "length" if reason == "length" else "stop", policy_version=0)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.max_concurrency, thread_name_prefix="openai")
            return self._pool

    def close(self) -> None:
        """Let the request threads go."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _logprob_entries(logprobs: Any, chat: bool) -> tuple[list[str], list[float]]:
    """(tokens, log-probs) of either the completions (`tokens`, `token_logprobs`) or chat (`content`) form."""
    if not logprobs:
        return [], []
    if chat:
        content = logprobs.get("content") or []
        return [str(e["token"]) for e in content], [_finite(e["logprob"]) for e in content]
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    return [str(t) for t in tokens], [_finite(v) for v in values]


def _finite(value: Any) -> float:
    x = float(value if value is not None else 0.0)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"non-finite log-prob {value!r}")
    return x


def _token_ids(tokens: Sequence[str]) -> list[int] | None:
    """Ids of `token_id:N` tokens; None when the server sent token text instead."""
    if not tokens or not all(t.startswith(TOKEN_ID_PREFIX) for t in tokens):
        return None
    return [int(t[len(TOKEN_ID_PREFIX) :]) for t in tokens]
