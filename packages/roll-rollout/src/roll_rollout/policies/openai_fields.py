"""What the training proxy does with every field of an OpenAI request: honoured, inert, or refused by name.

One table per endpoint (`CHAT_FIELDS` for `chat/completions`, `RESPONSES_FIELDS` for `responses`), and
`call_options(body, fields, sampling)`, which checks a request body against its table and returns the
`CallOptions` the proxy honours. A field is one of:

- `read`: the proxy honours it (`messages`, `tools`, `stop`, `stream`, ...; see `CallOptions`);
- `inert`: accepted as any value, because it does not change what is sampled (`model`, `user`, `store`,
  `metadata`, `parallel_tool_calls`, ...);
- `run`: sampling the run owns (`temperature`, `top_p`): null, or the run's own value, is accepted (what
  frameworks send by default); any other value is HTTP 400, since the agent would sample otherwise than
  training assumes;
- a no-op value (`presence_penalty: 0`, `n: 1`, `response_format: {type: text}`, ...): null or that value
  is accepted, anything else is HTTP 400 naming the field.

A field in no table is HTTP 400 too: never silently dropped. docs/openai_agent.md lists every field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roll_rollout.policies.openai_chat import ChatRequestError
from roll_rollout.policies.policy import SamplingSettings

READ, INERT, RUN = "read", "inert", "run"


@dataclass(frozen=True)
class NoOp:
    """A field accepted only as null or as `value` (its effect-free setting); `why` says why others are refused."""

    value: Any
    why: str = "roll samples every call with the run's own settings"


_INERT_BOTH = dict.fromkeys(
    ("model", "user", "metadata", "store", "parallel_tool_calls", "service_tier", "prompt_cache_key",
     "safety_identifier", "stream_options"),
    INERT,
)  # fmt: skip
_CHAT_READ = (
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "logprobs",
    "stop",
    "stream",
)
_NOT_STORED = "roll stores no responses or conversations: send the whole history in the request"
_NOT_CONSTRAINED = "roll samples freely and cannot constrain the output"

CHAT_FIELDS: dict[str, Any] = {
    **_INERT_BOTH,
    **dict.fromkeys(_CHAT_READ, READ),
    "temperature": RUN,
    "top_p": RUN,
    "n": NoOp(1, "each call trains as one row and the agent continues with one reply"),
    "presence_penalty": NoOp(0),
    "frequency_penalty": NoOp(0),
    "logit_bias": NoOp({}),
    "seed": NoOp(None, "each call's random stream is roll's own (seeds.sample_key)"),
    "top_logprobs": NoOp(0, "the policy returns the sampled token's log-prob only"),
    "response_format": NoOp({"type": "text"}, _NOT_CONSTRAINED),
    "reasoning_effort": NoOp(None),
    "verbosity": NoOp(None),
    "modalities": NoOp(["text"], "the policy answers text only"),
    "audio": NoOp(None, "the policy answers text only"),
    "prediction": NoOp(None),
    "web_search_options": NoOp(None, "the proxy runs no tools"),
    "functions": NoOp(None, "send them as tools"),
    "function_call": NoOp(None, "send tool_choice instead"),
}
"""Every `chat/completions` field the proxy knows, and what it does with it."""

RESPONSES_FIELDS: dict[str, Any] = {
    **_INERT_BOTH,
    **dict.fromkeys(
        ("input", "instructions", "tools", "tool_choice", "max_output_tokens", "stream", "include"), READ
    ),
    "prompt_cache_retention": INERT,
    "temperature": RUN,
    "top_p": RUN,
    "truncation": NoOp("disabled", "roll never drops input items"),
    "previous_response_id": NoOp(None, _NOT_STORED),
    "conversation": NoOp(None, _NOT_STORED),
    "background": NoOp(False, "every response is answered in its request"),
    "top_logprobs": NoOp(0, "the policy returns the sampled token's log-prob only"),
    "text": NoOp({"format": {"type": "text"}}, _NOT_CONSTRAINED),
    "reasoning": NoOp(None),
    "max_tool_calls": NoOp(None, _NOT_CONSTRAINED),
    "prompt": NoOp(None, "send the prompt's text as input"),
}
"""Every `responses` field the proxy knows, and what it does with it."""

INCLUDE_LOGPROBS = "message.output_text.logprobs"
_INCLUDABLE = {INCLUDE_LOGPROBS, "reasoning.encrypted_content"}  # the proxy sends no reasoning items
MAX_STOP = 4


@dataclass(frozen=True)
class CallOptions:
    """What a request asks of its call that the proxy honours."""

    max_tokens: int | None = None  # lowers the run's per-call budget
    stop: tuple[
        str, ...
    ] = ()  # the reply ends before the first; the recorded ids with the token completing it
    offer_tools: bool = True  # False for tool_choice "none": the tools are left out of the prompt
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False  # chat streaming: a last chunk with the usage


def call_options(
    body: Mapping[str, Any], fields: Mapping[str, Any], sampling: SamplingSettings
) -> CallOptions:
    """The options of `body` (a request of the endpoint whose table is `fields`), or `ChatRequestError`."""
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise ChatRequestError(
            f"roll's OpenAI endpoint does not know the field(s) {unknown}; it refuses what it cannot honour "
            "rather than ignore it (docs/openai_agent.md lists every field): remove them"
        )
    for name, rule in fields.items():
        value = body.get(name)
        if value is None or rule in (READ, INERT):
            continue
        if rule == RUN:
            _check_run_value(name, value, sampling)
        elif value != rule.value:
            raise ChatRequestError(
                f"{name}={value!r} is not supported: {rule.why}; send null or {rule.value!r}, or omit it"
            )
    stream_options = body.get("stream_options") or {}
    include = _include(body.get("include"))
    return CallOptions(
        max_tokens=_max_tokens(body, sampling),
        stop=_stop(body.get("stop")),
        offer_tools=_offer_tools(body.get("tool_choice")),
        logprobs=bool(body.get("logprobs")) or INCLUDE_LOGPROBS in include,
        stream=_flag(body, "stream"),
        include_usage=isinstance(stream_options, Mapping) and bool(stream_options.get("include_usage")),
    )


def _check_run_value(name: str, value: Any, sampling: SamplingSettings) -> None:
    own = 0.0 if sampling.greedy and name == "temperature" else getattr(sampling, name)
    if not (isinstance(value, int | float) and math.isclose(value, own, rel_tol=0, abs_tol=1e-9)):
        raise ChatRequestError(
            f"{name}={value!r} differs from the run's {name}={own:g}: what the agent samples must be what "
            f"training assumes; send null or {own:g}, or omit it (set it in actor_infer.generating_args)"
        )


def _max_tokens(body: Mapping[str, Any], sampling: SamplingSettings) -> int | None:
    name = next(
        (n for n in ("max_completion_tokens", "max_tokens", "max_output_tokens") if body.get(n) is not None),
        None,
    )
    if name is None:
        return None
    asked = body[name]
    if isinstance(asked, bool) or not isinstance(asked, int) or asked <= 0:
        raise ChatRequestError(f"{name} must be a positive integer, got {asked!r}")
    if asked > sampling.max_new_tokens:
        raise ChatRequestError(
            f"{name}={asked} is more than the run's {sampling.max_new_tokens} new tokens a call "
            "(max_tokens_per_step): ask for at most that, or raise max_tokens_per_step"
        )
    return asked


def _stop(stop: Any) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else stop
    if stops is None:
        return ()
    if not (
        isinstance(stops, list) and len(stops) <= MAX_STOP and all(isinstance(s, str) and s for s in stops)
    ):
        raise ChatRequestError(
            f"stop must be a non-empty string or a list of at most {MAX_STOP}, got {stop!r}"
        )
    return tuple(stops)


def _offer_tools(choice: Any) -> bool:
    if choice in (None, "auto"):
        return True
    if choice == "none":
        return False
    raise ChatRequestError(
        f"tool_choice={choice!r} cannot be guaranteed: {_NOT_CONSTRAINED}, so no call can be forced; send "
        "'auto' (or omit it) and ask for the call in the prompt, or 'none' to offer no tools"
    )


def _include(include: Any) -> list[str]:
    if include is None:
        return []
    if not (isinstance(include, list) and set(include) <= _INCLUDABLE):
        raise ChatRequestError(f"include may hold only {sorted(_INCLUDABLE)}, got {include!r}")
    return include


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise ChatRequestError(f"{name} must be true or false, got {value!r}")
    return bool(value)
