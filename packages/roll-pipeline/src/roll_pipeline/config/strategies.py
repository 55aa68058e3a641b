"""Config-time check of every role's `strategy_name` / `strategy_config` through the roll_strategies registry
(unknown, wrong role, or extra not installed: the error names the extra), run by `roll config` / `roll train`
before anything starts (`preflight.py`). Imports no backend (registry `find_spec` only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_pipeline.config.compose import raw_section
from roll_pipeline.config.roles import WorkerConfig
from roll_pipeline.config.schema import AgenticConfig

__all__ = ["ROLE_OF", "strategy_problems"]

ROLE_OF: dict[str, str] = {
    "actor_train": "train",
    "actor_infer": "infer",
    "reference": "reference",
    "critic": "critic",
}
"""Config section -> the roll_strategies role its worker serves."""


def _default_role(section: str) -> WorkerConfig:
    factory = AgenticConfig.model_fields[section].default_factory
    assert factory is not None
    return factory()  # type: ignore[call-arg]


def _raw_strategy(data: Mapping[str, Any], section: str) -> tuple[Any, Any]:
    """(strategy_name, strategy_config) of a role in a raw config mapping; missing keys take the defaults."""
    default = _default_role(section).strategy_args
    args = raw_section(data, section, "strategy_args")
    return args.get("strategy_name", default.strategy_name), args.get("strategy_config") or {}


def strategy_problems(data: Mapping[str, Any]) -> list[str]:
    """One problem per role whose strategy cannot run here: unknown, wrong role, extra not installed, or a
    `strategy_config` given to a backend that reads none. Imports no backend (registry `find_spec` only)."""
    from roll_strategies import STRATEGIES, check_strategy
    from roll_strategies.errors import StrategyError

    problems = []
    for section, role in ROLE_OF.items():
        name, config = _raw_strategy(data, section)
        if not isinstance(name, str):
            continue  # the schema reports the wrong type
        where = f"{section}.strategy_args"
        try:
            spec = check_strategy(name, role)  # type: ignore[arg-type]
        except StrategyError as exc:
            problems.append(f"{where}.strategy_name={name!r}: {exc}")
            continue
        if isinstance(config, Mapping) and config and not STRATEGIES[spec.name].takes_config:
            problems.append(
                f"{where}.strategy_config={dict(config)!r}: {name!r} reads no strategy_config; drop it, or "
                "pick a backend that reads one (deepspeed_train for actor_train, vllm or hf_infer for actor_infer)"
            )
    return problems
