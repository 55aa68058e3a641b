"""A LangChain agent (`ChatOpenAI(...).bind_tools(...)`): nothing in it knows about roll.

`run(base_url, task)` asks the bound model up to 3 times, running its `read_task` tool, until it calls
`submit_answer`; roll trains it through its training proxy like any other OpenAI-client agent
(docs/openai_agent.md).
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def read_task() -> str:
    """Show the task text again."""
    return ""


@tool
def submit_answer(answer: str) -> str:
    """Submit the final answer; this ends the episode."""
    return answer


def run(base_url: str, task: dict) -> dict:
    """Play one task; returns {"answer": ...} for the caller to check."""
    model = ChatOpenAI(model="policy", base_url=base_url, api_key="not-needed", max_retries=0)
    bound = model.bind_tools([read_task, submit_answer])
    choices = ", ".join(task.get("actions") or []) or "any text"
    messages = [
        SystemMessage(f"Solve the task. Allowed answers: {choices}. Use the tools."),
        HumanMessage(task["prompt"]),
    ]
    for _ in range(3):
        reply = bound.invoke(messages)
        messages.append(reply)
        for call in reply.tool_calls:
            if call["name"] == "submit_answer":
                return {"answer": str(call["args"].get("answer", "")).strip()}
            messages.append(ToolMessage(task["prompt"], tool_call_id=call["id"]))
        if not reply.tool_calls:
            messages.append(HumanMessage("Call submit_answer with your answer."))
    return {"answer": str(reply.content).strip()}
