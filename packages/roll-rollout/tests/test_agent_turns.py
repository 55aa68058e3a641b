"""An `openai_agent` episode's recorded calls as turns: one chained conversation exactly where each call's
prompt starts with the previous call's prompt + sampled ids; otherwise one turn per call, counted and logged
once per tag with the first differing position. tests/test_openai_agent.py plays both through the proxy."""

from __future__ import annotations

import logging

import pytest
from roll_rollout.hosting import agent_turns
from roll_rollout.hosting.agent_turns import calls_to_turns, chain_break
from roll_rollout.policies.agent_proxy import RecordedCall
from roll_rollout.policies.policy import GenerateResult


def call(prompt: list[int], out: list[int]) -> RecordedCall:
    return RecordedCall(prompt, GenerateResult(out, [-0.5] * len(out), "stop", 0), "text", "last")


def chained_episode(observation: list[int]) -> list[RecordedCall]:
    """Three calls, each prompt the previous prompt + sampled ids + `observation` (the same tool result)."""
    p0, r = [1, 2, 3], [7, 8]
    p1 = p0 + r + observation
    p2 = p1 + r + observation
    return [call(p0, r), call(p1, r), call(p2, r)]


@pytest.fixture(autouse=True)
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_turns, "_told", set())


def test_calls_that_extend_each_other_chain_and_anchor_on_what_each_added() -> None:
    calls = chained_episode([4, 5])
    turns, chained = calls_to_turns(calls, 1.0, "T")
    assert chained and chain_break(calls) is None
    assert [t.reward for t in turns] == [0.0, 0.0, 1.0]
    # calls 1 and 2 saw the same new observation: one GiGPO anchor, whatever history came before
    assert turns[1].anchor_id == turns[2].anchor_id != turns[0].anchor_id
    other = calls_to_turns(chained_episode([4, 6]), 1.0, "T")[0]
    assert other[0].anchor_id == turns[0].anchor_id and other[1].anchor_id != turns[1].anchor_id
    assert [t.prompt_ids for t in turns] == [c.prompt_ids for c in calls]
    assert [t.response_ids for t in turns] == [c.result.output_ids for c in calls]


def test_a_re_rendered_history_does_not_chain_and_says_where_once_per_tag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = chained_episode([4, 5])
    calls[2] = call([1, 2, 3, 7, 9, 4, 5, 7, 8, 4, 5], [7, 8])  # call 1's reply re-tokenised as [7, 9]
    with caplog.at_level(logging.WARNING, logger="roll_rollout.hosting.agent_turns"):
        turns, chained = calls_to_turns(calls, 1.0, "T")
        calls_to_turns(calls, 1.0, "T")
        calls_to_turns(calls, 1.0, "U")
    assert not chained and len(turns) == 3 and turns[-1].reward == 1.0
    assert "call 2's prompt" in chain_break(calls) and "first difference at position 4" in chain_break(calls)
    assert [r.message.split("'")[1] for r in caplog.records] == ["T", "U"]
    assert (
        "first difference at position 4, [8, 4, 5, 7, 8] sampled vs [9, 4, 5, 7, 8, 4, 5]"
        in caplog.records[0].message
    )
    # no chain: each call is its own state, its whole prompt at its call index
    assert len({t.anchor_id for t in turns}) == 3
