"""The JSON-over-HTTP plumbing both OpenAI-compatible endpoints share: the training proxy of `openai_agent`
tags (`agent_proxy.py`) and `roll serve` (roll-pipeline's `serving/openai_server.py`).

A request body is one JSON object of at most `MAX_BODY_BYTES`; every failure is an `HttpError`, answered with
an OpenAI-style error body (`{"error": {"message", "type", "code"}}`), so a client's OpenAI library raises
its own exception with the message instead of hanging or failing to parse. A streamed reply goes out as one
whole server-sent-events body (`send_events`). Standard library only.
"""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 4 * 1024 * 1024


class HttpError(Exception):
    """A request answered with the HTTP error `status`; `code` is the error body's code (default: status)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class JsonHttpServer(ThreadingHTTPServer):
    """The endpoints' server: a thread per request, and a listen queue as long as the kernel allows. The
    stdlib's queue of 5 resets each connection past the sixth that arrives while the accept loop waits (for
    the GIL, on a loaded machine): 32 agents starting at once then fail with ConnectionResetError."""

    request_queue_size = socket.SOMAXCONN
    daemon_threads = True


class JsonRequestHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that reads one JSON object per request and answers JSON (or events)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per request
        pass

    def read_json_object(self) -> dict[str, Any]:
        """The request's body as a JSON object, or `HttpError` 400 saying what is wrong with it."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY_BYTES:
            raise HttpError(400, f"body must have 1..{MAX_BODY_BYTES} bytes, got {length}")
        try:
            body = json.loads(self.rfile.read(length))
        except json.JSONDecodeError as exc:
            raise HttpError(400, f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise HttpError(400, "body must be a JSON object")
        return body

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, body: str) -> None:
        """A whole server-sent-events body (`text/event-stream`), sent at once with its length."""
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_answer(self, answer: dict[str, Any] | str) -> None:
        """A handler's answer: a JSON object with 200, or a whole server-sent-events body (a streamed reply)."""
        if isinstance(answer, str):
            self.send_events(answer)
        else:
            self.send_json(200, answer)

    def send_http_error(self, exc: HttpError) -> None:
        """The OpenAI-style error body of `exc` (a client error below 500, a server error from 500)."""
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        self.send_json(
            exc.status, {"error": {"message": str(exc), "type": kind, "code": exc.code or exc.status}}
        )
