"""An OpenAI Agents SDK agent on the SDK's defaults (the Responses API): nothing in it knows about roll.

`run(base_url, task)` gives the SDK's `Agent` one tool, `submit_answer`, and lets `Runner.run` drive it for
at most 3 model calls; the answer submitted (or the final text) is the episode's answer. roll trains it
through its training proxy like any other OpenAI-client agent (docs/openai_agent.md).
"""

from __future__ import annotations

import asyncio

from agents import Agent, MaxTurnsExceeded, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI


def run(base_url: str, task: dict) -> dict:
    """Play one task; returns {"answer": ...} for the caller to check."""
    return asyncio.run(_play(base_url, task))


async def _play(base_url: str, task: dict) -> dict:
    submitted: list[str] = []

    @function_tool
    def submit_answer(answer: str) -> str:
        """Submit the final answer; this ends the episode."""
        submitted.append(answer.strip())
        return "submitted"

    # the client is closed on the loop that used it (the SDK's run_sync would leave that to a closed loop)
    async with AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0) as client:
        agent = Agent(
            name="solver",
            instructions=f"Solve the task. Allowed answers: {', '.join(task.get('actions') or [])}.",
            tools=[submit_answer],
            model=OpenAIResponsesModel(model="policy", openai_client=client),
            tool_use_behavior="stop_on_first_tool",
        )
        try:
            result = await Runner.run(
                agent, task["prompt"], max_turns=3, run_config=RunConfig(tracing_disabled=True)
            )
        except MaxTurnsExceeded:  # the model never stopped calling tools
            return {"answer": submitted[0] if submitted else ""}
    return {"answer": submitted[0] if submitted else str(result.final_output or "").strip()}
