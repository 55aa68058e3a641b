"""Typed msgpack decoding, shared by the trajectory schema and the policy payloads.

Payloads are decoded by msgspec straight into typed structs, which checks every value down to its
element type and range in one pass (in C): token ids are ints in [0, 2**31), log-probs finite floats
<= 0, rewards and metric values finite floats, bools strictly bool, ints never bool, strings of a
bounded length. The annotated types below are those rules; `decode_typed` turns msgspec's errors into
a `PayloadError` that names the field path, the value that came and the rule it broke.

Why msgspec and not checks written by hand: decoding 512 trajectories of 10 turns validated element
by element in Python costs about 1.5x plain `msgpack.unpackb`, while msgspec validates at the cost of
unpacking alone (docs/benchmarks.md, "Trajectory decoding").
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, TypeVar

import msgpack
import msgspec
from msgspec import Meta

from roll_rollout.errors import PayloadError

__all__ = [
    "MAX_COUNT",  # largest id, seed, step or version
    "MAX_NAME_CHARS",  # longest tag, finish reason, metric name
    "MAX_TEXT_CHARS",  # longest response text, state key, error message
    "MAX_TOKEN_ID",  # token ids lie in [0, MAX_TOKEN_ID)
    "REQUEST_DECODER",  # typed decoder of a generate request
    "RESULT_DECODER",  # typed decoder of a generate result
    "RULES",  # the rule an error message quotes, by field name
    "Count",  # non-negative int64
    "FiniteFloat",  # finite float
    "LogProb",  # finite float <= 0
    "Name",  # str of at most MAX_NAME_CHARS
    "PositiveInt",  # int64 >= 1
    "RequestWire",  # GenerateRequest on the wire
    "ResultWire",  # GenerateResult on the wire
    "SamplingWire",  # SamplingSettings on the wire
    "Text",  # str of at most MAX_TEXT_CHARS
    "TokenId",  # int in [0, 2**31)
    "decode_typed",  # typed decode; errors become PayloadError naming the field
    "describe_validation_error",  # msgspec's message as a field path + value + rule
]

MAX_TOKEN_ID = 2**31
"""Token ids lie in [0, MAX_TOKEN_ID): every tokenizer's vocabulary fits, and so does an int32 tensor."""

MAX_COUNT = 2**63 - 1
"""Largest id, seed, step or version a payload may carry (fits an int64 tensor)."""

MAX_NAME_CHARS = 256
"""Longest tag, finish reason or metric name."""

MAX_TEXT_CHARS = 1 << 20
"""Longest free text (response text, state key, error message): 1,048,576 characters."""

_FLOAT_MAX = sys.float_info.max

TokenId = Annotated[int, Meta(ge=0, lt=MAX_TOKEN_ID)]
"""A token id: an int (never a bool) in [0, 2**31)."""

LogProb = Annotated[float, Meta(ge=-_FLOAT_MAX, le=0.0)]
"""A log-probability: a finite float <= 0 (NaN and -inf fail the lower bound)."""

FiniteFloat = Annotated[float, Meta(ge=-_FLOAT_MAX, le=_FLOAT_MAX)]
"""A finite float (NaN and +-inf fail the bounds); an int is accepted and converted."""

Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
"""A non-negative int64 (ids, seeds, versions)."""

PositiveInt = Annotated[int, Meta(ge=1, le=MAX_COUNT)]
"""An int64 >= 1."""

Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]
"""A short name: at most MAX_NAME_CHARS characters."""

Text = Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]
"""Free text: at most MAX_TEXT_CHARS characters."""

RULES: dict[str, str] = {
    "prompt_ids": f"token ids are ints in [0, {MAX_TOKEN_ID})",
    "response_ids": f"token ids are ints in [0, {MAX_TOKEN_ID})",
    "output_ids": f"token ids are ints in [0, {MAX_TOKEN_ID})",
    "log_probs": "log-probs are finite floats <= 0",
    "reward": "rewards are finite floats",
    "metrics": f"metrics map names of at most {MAX_NAME_CHARS} characters to finite floats",
    "temperature": "the temperature is a finite float > 0 (greedy=True for argmax decoding)",
    "top_p": "top_p is a float in (0, 1]",
}
"""The rule an error message quotes, by field name (fields not listed: the schema type says it)."""

T = TypeVar("T")

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def decode_typed(decoder: msgspec.msgpack.Decoder[T], payload: Any, what: str) -> T:
    """Decode `payload` with a typed msgspec `decoder`; any failure is a `PayloadError` naming the field.

    `what` names the root of the field paths in messages, e.g. "trajectory" or "generate result".
    """
    try:
        return decoder.decode(payload)
    except msgspec.ValidationError as exc:
        raise PayloadError(describe_validation_error(str(exc), payload, what)) from None
    except TypeError as exc:  # not a bytes-like object
        raise PayloadError(f"{what} must be bytes, got {type(payload).__name__} ({exc})") from None
    except Exception as exc:  # garbage raises DecodeError, UnicodeDecodeError, RecursionError, ...
        raise PayloadError(f"{what} is not valid msgpack ({type(exc).__name__}: {exc})") from None


def describe_validation_error(message: str, payload: Any, what: str) -> str:
    """msgspec's "Expected ... - at `$.a[0].b`" as "what.a[0].b: expected ... (value: ...); rule"."""
    text, _, where = message.partition(" - at `")
    text = text.replace("`", "")
    if repr(_FLOAT_MAX) in text:  # the bounds that keep NaN and +-inf out
        text = "Expected a finite float"
    where = where.rstrip("`")
    key_of = where.startswith("key` in `")
    path = where.removeprefix("key` in `").removeprefix("$")
    field = f"{what}{path}"
    value = "" if key_of else _value_at(payload, path)
    names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path)
    rule = RULES.get(names[-1], "") if names else ""
    return (
        f"{'a key of ' if key_of else ''}{field}: {text[:1].lower()}{text[1:]}{value}"
        f"{f'; {rule}' if rule else ''}. The payload breaks the {what} schema: fix the code that built it"
        " (only encode values the dataclass types allow)"
    )


def _value_at(payload: Any, path: str) -> str:
    """`(value: ...)` of the field at `path` (".turns[0].reward") in the raw payload, or "" if unknown."""
    if not path or "[...]" in path:  # empty, or inside a map (msgspec does not say which key)
        return ""
    try:
        node = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        for name, index in _STEP.findall(path):
            node = node[name] if name else node[int(index)]
    except Exception:  # the path may cross a part msgpack cannot read back; then say nothing
        return ""
    if isinstance(node, dict):  # a missing or unknown field: the message says which
        return ""
    return f" (value: {node!r:.80})"


class SamplingWire(msgspec.Struct, forbid_unknown_fields=True):
    """`SamplingSettings` as it travels (the ranges `HFInferStrategy` accepts)."""

    max_new_tokens: PositiveInt
    temperature: Annotated[float, Meta(gt=0.0, le=_FLOAT_MAX)]
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)]
    top_k: Count
    greedy: bool


class RequestWire(msgspec.Struct, forbid_unknown_fields=True):
    """`GenerateRequest` as it travels."""

    prompt_ids: list[TokenId]
    sampling: SamplingWire
    sample_key: Count | None = None


class ResultWire(msgspec.Struct, forbid_unknown_fields=True):
    """`GenerateResult` as it travels."""

    output_ids: list[TokenId]
    log_probs: list[LogProb]
    finish_reason: Name
    policy_version: Count


REQUEST_DECODER = msgspec.msgpack.Decoder(RequestWire)
"""Typed decoder of one generate request payload."""

RESULT_DECODER = msgspec.msgpack.Decoder(ResultWire)
"""Typed decoder of one generate result payload."""
