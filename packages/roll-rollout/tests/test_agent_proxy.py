"""`openai_agent` slots: an agent speaking the OpenAI chat API through the training proxy plays each episode;
every call it makes is one turn holding the ids the policy was given and sampled. The agents here use urllib
(roll must not need the `openai` package); tests/test_openai_agent.py runs the example agent on `openai`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from roll_rollout import sample_key
from roll_rollout.hosting.agent_manager import AgentConfig, AgentConfigError, load_agent
from roll_rollout.policies.openai_chat import assistant_message, chat_prompt_ids
from roll_rollout.testing import ScriptedPolicy

HERE = Path(__file__).resolve()
TOOLS = [
    {"type": "function", "function": {"name": "submit", "parameters": {"type": "object", "properties": {}}}}
]
SEED_YELLOW = 0  # four_choice shows yellow for this seed: B is right


def post(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base_url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def two_calls(base_url: str, task: dict) -> dict:
    """Asks twice (the second time with the first reply in the history), then answers B."""
    messages = [{"role": "user", "content": task["prompt"]}]
    first = post(base_url, {"model": "x", "messages": messages, "logprobs": True})
    messages += [first["choices"][0]["message"], {"role": "user", "content": "Sure?"}]
    post(base_url, {"model": "x", "messages": messages})
    return {"answer": "B"}


def returns_reward(base_url: str, task: dict) -> float:
    post(base_url, {"messages": [{"role": "user", "content": task["prompt"]}]})
    return 0.25


def never_calls(base_url: str, task: dict) -> float:
    return 1.0


def raises(base_url: str, task: dict) -> float:
    post(base_url, {"messages": [{"role": "user", "content": task["prompt"]}]})
    raise RuntimeError("agent bug")


def loops_forever(base_url: str, task: dict) -> float:
    """Calls until the proxy refuses (HTTP 400 past the call budget), then gives up as an agent would."""
    while True:
        post(base_url, {"messages": [{"role": "user", "content": task["prompt"]}]})


def test_each_call_is_a_turn_holding_the_ids_the_policy_was_given_and_sampled(
    chat_tokenizer, play_agent
) -> None:
    ids = chat_tokenizer.encode("Left", add_special_tokens=False)
    policy = ScriptedPolicy(ids, record=True)
    traj = play_agent(chat_tokenizer, f"{HERE}:two_calls", policy)
    assert traj.error is None
    assert [t.prompt_ids for t in traj.turns] == [r.prompt_ids for r in policy.seen]
    assert all(t.response_ids == ids and t.log_probs == [-0.5] * len(ids) for t in traj.turns)
    # the env checked B for yellow: the last call earns the reward
    assert [t.reward for t in traj.turns] == [0.0, 1.0]
    assert traj.success and traj.terminated
    assert [r.sample_key for r in policy.seen] == [sample_key(SEED_YELLOW, 0, 9, i) for i in range(2)]
    assert policy.seen[1].prompt_ids[: len(policy.seen[0].prompt_ids)] == policy.seen[0].prompt_ids


def test_a_returned_number_is_the_reward(chat_tokenizer, play_agent) -> None:
    traj = play_agent(chat_tokenizer, f"{HERE}:returns_reward", ScriptedPolicy([5], record=True))
    assert traj.error is None and [t.reward for t in traj.turns] == [0.25]


@pytest.mark.parametrize(
    ("agent", "kind", "says"),
    [("never_calls", "env_error", "no chat.completions call"), ("raises", "env_error", "agent bug")],
)
def test_a_failing_agent_fails_its_episode_only(
    chat_tokenizer, play_agent, agent: str, kind: str, says: str
) -> None:
    traj = play_agent(chat_tokenizer, f"{HERE}:{agent}", ScriptedPolicy([5], record=True))
    assert traj.error is not None and traj.error.startswith(kind) and says in traj.error


def test_calls_past_the_budget_are_refused_and_the_episode_is_truncated(chat_tokenizer, play_agent) -> None:
    policy = ScriptedPolicy([5], record=True)
    traj = play_agent(chat_tokenizer, f"{HERE}:loops_forever", policy, max_turns=3)
    assert traj.error is None and traj.truncated and not traj.terminated
    assert len(traj.turns) == 3 == len(policy.seen) and traj.score == 0.0


def test_the_agent_config_says_how_to_fix_it() -> None:
    with pytest.raises(AgentConfigError, match="module:function"):
        AgentConfig.from_env_config({"agent": "no_colon", "task_env": "four_choice"})
    with pytest.raises(AgentConfigError, match="unknown keys"):
        AgentConfig.from_env_config({"agent": "a:b", "task_env": "x", "tasks": []})
    with pytest.raises(AgentConfigError, match="does not load"):
        load_agent("no_such_module_here:run")
    assert load_agent(f"{HERE}:two_calls").__name__ == "two_calls"


def test_tools_go_into_the_system_message_of_a_template_without_tool_support(chat_tokenizer) -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "submit", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "Left"},
    ]
    seen: dict[str, Any] = {}

    class Spy:
        chat_template = chat_tokenizer.chat_template

        def apply_chat_template(self, conversation: Any, **kwargs: Any) -> list[int]:
            seen["conversation"], seen["kwargs"] = conversation, kwargs
            return [1]

    assert chat_prompt_ids(Spy(), messages, TOOLS) == [1]  # type: ignore[arg-type]
    system, _, assistant, tool = seen["conversation"]
    assert system["role"] == "system" and '"name": "submit"' in system["content"]
    assert assistant["content"] == '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    assert tool == {"role": "user", "content": "<tool_response>\nLeft\n</tool_response>"}
    Spy.chat_template = "{{ tools }}"  # a template that renders tools itself gets them as they are
    chat_prompt_ids(Spy(), messages, TOOLS)  # type: ignore[arg-type]
    assert seen["kwargs"]["tools"] == TOOLS
    assert seen["conversation"][1]["tool_calls"][0]["function"]["arguments"] == {}


def test_tool_calls_are_read_from_the_sampled_text() -> None:
    message, called = assistant_message(
        'Done. <tool_call>{"name": "submit", "arguments": {"x": 1}}</tool_call>', TOOLS
    )
    assert called and message["content"] == "Done."
    assert message["tool_calls"][0]["function"] == {"name": "submit", "arguments": '{"x": 1}'}
    assert assistant_message("no call here", TOOLS) == (
        {"role": "assistant", "content": "no call here"},
        False,
    )
    assert assistant_message('{"name": "submit"}', None)[1] is False  # no tools offered: plain text
