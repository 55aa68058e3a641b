"""Kinds of env type are registered (`roll_rollout.hosting.env_kinds`): one table maps an env type to its manager, its
config check and its preflight check, and no code of the workspace compares an env type with `openai_agent`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from roll_rollout import RolloutError
from roll_rollout.hosting.agent_manager import AGENT_ENV_TYPE, AgentConfigError, AgentEnvManager
from roll_rollout.hosting.env_kinds import ENV_KINDS, ROLL_ENV, env_kind
from roll_rollout.hosting.env_manager import TrajEnvManager

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "packages" / "roll-rollout" / "src" / "roll_rollout" / "env_kinds.py"
NAMES = {repr(AGENT_ENV_TYPE), "AGENT_ENV_TYPE"}
"""How code spells the agent kind's env type: the literal, or its constant."""


def kind_comparisons(source: str) -> list[str]:
    """Each comparison in `source` with the agent env type on one side (`==`, `!=`, `in`, `is`, a match case)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            spelled = {ast.unparse(e) for side in sides for e in [side, *getattr(side, "elts", [])]}
            if spelled & NAMES:
                found.append(ast.unparse(node))
        elif isinstance(node, ast.match_case) and ast.unparse(node.pattern) in NAMES:
            found.append(f"case {ast.unparse(node.pattern)}")
    return found


def test_the_check_finds_an_injected_comparison():
    source = (
        "a = spec.env_type == 'openai_agent'\nb = t in ('x', AGENT_ENV_TYPE)\n"
        "c = kind.agent_plays\nmatch t:\n    case 'openai_agent':\n        pass\n"
    )
    assert kind_comparisons(source) == [
        "spec.env_type == 'openai_agent'",
        "t in ('x', AGENT_ENV_TYPE)",
        "case 'openai_agent'",
    ]


def test_no_env_type_is_compared_by_name_outside_the_table():
    files = [p for d in ("packages", "tools", "benchmarks", "examples") for p in (ROOT / d).rglob("*.py")]
    found = {
        str(p.relative_to(ROOT)): hits
        for p in files
        if p != TABLE and "/tests/" not in str(p) and (hits := kind_comparisons(p.read_text()))
    }
    assert found == {}


def test_the_table_maps_each_kind_to_its_manager_and_checks():
    agent = env_kind(AGENT_ENV_TYPE)
    assert {AGENT_ENV_TYPE: agent} == ENV_KINDS and env_kind("frozen_lake") is ROLL_ENV
    assert (agent.manager, ROLL_ENV.manager) == (AgentEnvManager, TrajEnvManager)
    assert agent.agent_plays and not ROLL_ENV.agent_plays
    config = {
        "agent": "examples.openai_agent.agent:play",
        "task_env": "four_choice",
        "task_env_config": {"k": 1},
    }
    assert agent.played_env(AGENT_ENV_TYPE, config) == ("four_choice", {"k": 1})
    assert ROLL_ENV.played_env("frozen_lake", {"size": 4}) == ("frozen_lake", {"size": 4})
    with pytest.raises(AgentConfigError, match=r"env_config\.task_env must name a registered roll env"):
        agent.played_env(AGENT_ENV_TYPE, {"agent": "m:f"})
    with pytest.raises(RolloutError, match="does not load"):
        agent.preflight({"agent": "no_such_module_here:play", "task_env": "four_choice"})
