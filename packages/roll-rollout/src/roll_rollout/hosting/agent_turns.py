"""An `openai_agent` episode's recorded calls as trained turns: one chained conversation where that is exact.

The calls chain when each call's prompt ids start with the previous call's prompt ids followed by the
ids it sampled (the chat template re-renders earlier turns as they were sampled). Then the episode is
one multi-turn conversation: `sample_shape: trajectory` trains it as one row, and each call's GiGPO
anchor is its new observation (the prompt ids after the previous prompt + response: the tool results
and messages the agent added), as an env turn's anchor is the observation it acted on.

Where they do not chain (the template drops earlier reasoning or re-tokenises the assistant text, or the
agent edits its history), each call is a turn of its own, anchored on its whole prompt and call index,
and the episode's `UNCHAINED_METRIC` is 1: its calls train as one row each in either sample shape
(roll_pipeline.trainer.samples), and the run logs the first such episode of each tag with the reason.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

from roll_rollout.policies.agent_proxy import RecordedCall
from roll_rollout.schema import Turn
from roll_rollout.wire import MAX_TEXT_CHARS

UNCHAINED_METRIC = "agent_unchained"
"""Episode metric of an `openai_agent` episode: 1 when its calls do not chain (one row per call), else 0."""

_log = logging.getLogger(__name__)
_told: set[str] = set()  # tags whose first unchained episode was logged (once per process)


def chain_break(calls: Sequence[RecordedCall]) -> str | None:
    """Why the calls do not chain (the call, the first differing position and ids), or None when they do."""
    for k in range(1, len(calls)):
        prev, prompt = calls[k - 1], calls[k].prompt_ids
        head = [*prev.prompt_ids, *prev.result.output_ids]
        if prompt[: len(head)] == head:
            continue
        at = next((i for i, (a, b) in enumerate(zip(head, prompt, strict=False)) if a != b), len(prompt))
        return (
            f"call {k}'s prompt ({len(prompt)} ids) does not start with call {k - 1}'s prompt + sampled ids"
            f" ({len(head)} ids): first difference at position {at}, {head[at : at + 8]} sampled vs"
            f" {prompt[at : at + 8]} re-rendered"
        )
    return None


def calls_to_turns(calls: Sequence[RecordedCall], reward: float, tag: str) -> tuple[list[Turn], bool]:
    """(the calls as turns, the episode's reward on the last one; whether they chain)."""
    broken = chain_break(calls)
    if broken is not None and tag not in _told:
        _told.add(tag)
        _log.warning(
            "openai_agent tag %r: an episode's calls do not chain into one conversation, so they train as one"
            " row per call (counted in %s; later episodes of this tag are not logged): %s",
            tag,
            UNCHAINED_METRIC,
            broken,
        )
    turns = []
    for i, call in enumerate(calls):
        if broken is None:  # the anchor: what this call added to the conversation
            head = len(calls[i - 1].prompt_ids) + len(calls[i - 1].result.output_ids) if i else 0
            key = f"obs {_digest(call.prompt_ids[head:])}"
        else:
            key = f"call {i} {_digest(call.prompt_ids)}"
        turns.append(_turn(call, key, reward if i == len(calls) - 1 else 0.0))
    return turns, broken is None


def _digest(ids: Sequence[int]) -> str:
    return hashlib.blake2b(str(list(ids)).encode(), digest_size=16).hexdigest()


def _turn(call: RecordedCall, state_key: str, reward: float) -> Turn:
    """A recorded call as a trained turn: the ids as sent and sampled, never re-encoded."""
    return Turn(
        prompt_ids=list(call.prompt_ids),
        response_ids=list(call.result.output_ids),
        log_probs=list(call.result.log_probs),
        reward=reward,
        action_is_valid=call.read != "bad_tool_call",  # every other reply the proxy read in full
        action_is_effective=True,
        state_key=state_key,
        policy_version=call.result.policy_version,
        finish_reason=call.result.finish_reason,
        response_text=call.text[:MAX_TEXT_CHARS],
        observation=call.last_message[:MAX_TEXT_CHARS],
    )
