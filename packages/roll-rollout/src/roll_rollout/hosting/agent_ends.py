"""Why an `openai_agent` episode ended, and how the proxy read each reply: the metrics that say why it failed.

Every episode ends in exactly one of `END_KINDS`; its metrics hold `end/<kind>` for each kind, 1 for its
own and 0 for the others, so a tag's mean of `end/<kind>` (`val/env/<tag>/end/<kind>`, `env/<tag>/end/<kind>`)
is the share of its episodes that ended so. A failed episode (never trained on) carries these metrics too,
and is counted in them (roll_pipeline.observe.metrics). The kinds, healthy first:

- `done`: the agent stepped the task env through `step_url` until it answered done;
- `answered`: the agent returned an outcome (an answer the task env checked, or a reward);
- `no_tool_call`: the agent returned None, the task env not done, after a reply with no tool call in it
  (tools were offered: the model answered in prose, which ends an agent loop);
- `bad_tool_call`: the same after a reply whose tool call did not read (malformed JSON, an unclosed
  `<tool_call>`, a missing name) or named a tool the request did not offer;
- `agent_stopped`: the same after a read tool call, or a call without tools (the agent's own limit);
- `truncated`: a call was refused past `max_actions_per_traj` or `sequence_length` (reward 0);
- `agent_raised` (failed, `env_error`): the agent raised, no request of it having been refused;
- `proxy_refused` (failed, `env_error`): the agent raised, or made no recorded call, after the proxy
  answered one of its requests with an HTTP 4xx error (a field it refuses, an unknown route, a malformed body);
- `no_call` (failed, `env_error`): the agent returned without a call through its `base_url`;
- `bad_outcome` (failed, `env_error`): what it returned is not an outcome (a wrong type, a reward that is
  not a finite number, a value after stepping the task env);
- `agent_timeout` (failed, `env_timeout`): the agent outlived `agent_timeout_s`;
- `env_failed` (failed, `env_error` or `env_timeout`): the task env's constructor, reset, step or
  demonstration failed or timed out, or the tag cannot play the episode (demonstration without
  `demonstration_tool`);
- `policy_error` (failed): a generation failed.

Each recorded call's reply is read as one of `REPLY_READS` (`AgentProxy` reads it once, as it answers):
`text` (no tools offered), `tool_call` (every tool call read and named an offered tool), `no_tool_call`,
`bad_tool_call`. A call's turn has `action_is_valid` unless its reply is `bad_tool_call`: the proxy read
every other reply in full; and the episode's `reply/<read>` metrics are the shares of its calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from roll_rollout.hosting.env_calls import EnvCallError, EnvCallTimeout
from roll_rollout.policies.agent_proxy import REPLY_READS, RecordedCall

END_KINDS = (
    "done",
    "answered",
    "no_tool_call",
    "bad_tool_call",
    "agent_stopped",
    "truncated",
    "agent_raised",
    "proxy_refused",
    "no_call",
    "bad_outcome",
    "agent_timeout",
    "env_failed",
    "policy_error",
)
"""How an `openai_agent` episode can end (the module docstring says what each means)."""


class AgentFailed(EnvCallError):
    """The agent raised, made no call or returned no outcome: its episode is an `env_error` ending in `kind`."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in END_KINDS:
            raise ValueError(f"AgentFailed kind {kind!r} is not one of {END_KINDS}")
        super().__init__(message)
        self.kind = kind


class AgentTimeout(EnvCallTimeout):
    """The agent did not return within `agent_timeout_s`: its episode is an `env_timeout`."""


def failed_end(exc: BaseException) -> str:
    """The end kind of an episode that failed with `exc`."""
    if isinstance(exc, AgentFailed):
        return exc.kind
    if isinstance(exc, AgentTimeout):
        return "agent_timeout"
    return "env_failed" if isinstance(exc, EnvCallError) else "policy_error"


def stopped_end(calls: Sequence[RecordedCall]) -> str:
    """The end kind of an episode whose agent returned None before its task env was done: its last reply's."""
    last = calls[-1].read if calls else "text"
    return last if last in ("no_tool_call", "bad_tool_call") else "agent_stopped"


def end_metrics(kind: str, calls: Sequence[RecordedCall] = ()) -> dict[str, float]:
    """`end/<kind>` for every kind (1 for `kind`), and `reply/<read>` shares of `calls` when there are any."""
    out = {f"end/{k}": float(k == kind) for k in END_KINDS}
    if calls:
        out |= {f"reply/{r}": sum(c.read == r for c in calls) / len(calls) for r in REPLY_READS}
    return out
