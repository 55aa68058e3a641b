"""An OpenAI Agents SDK agent on the SDK's defaults (the Responses API): nothing in it knows about roll.

`run(base_url, task)` gives the SDK's `Agent` one tool, `submit_answer`, and lets `Runner.run_sync` drive it
for at most 3 model calls; the answer submitted (or the final text) is the episode's answer. roll trains it
through its training proxy like any other OpenAI-client agent (docs/openai_agent.md).
"""

from __future__ import annotations

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI


def run(base_url: str, task: dict) -> dict:
    """Play one task; returns {"answer": ...} for the caller to check."""
    submitted: list[str] = []

    @function_tool
    def submit_answer(answer: str) -> str:
        """Submit the final answer; this ends the episode."""
        submitted.append(answer.strip())
        return "submitted"

    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    agent = Agent(
        name="solver",
        instructions=f"Solve the task. Allowed answers: {', '.join(task.get('actions') or [])}.",
        tools=[submit_answer],
        model=OpenAIResponsesModel(model="policy", openai_client=client),
        tool_use_behavior="stop_on_first_tool",
    )
    final = ""
    try:
        result = Runner.run_sync(
            agent, task["prompt"], max_turns=3, run_config=RunConfig(tracing_disabled=True)
        )
        final = str(result.final_output or "").strip()
    except Exception as exc:  # the SDK raises MaxTurnsExceeded when the model never stopped calling
        if type(exc).__name__ != "MaxTurnsExceeded":
            raise
    return {"answer": submitted[0] if submitted else final}
