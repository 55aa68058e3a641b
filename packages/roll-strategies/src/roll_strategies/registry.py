"""The registry of strategies per role: `strategy_name` -> backend class, checked without importing it.

`check_strategy(name, role)` is cheap (it reads `importlib.util.find_spec`, never imports deepspeed or vllm),
so a config validator can call it; `create_strategy` imports the backend module and builds the strategy.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from roll_strategies.errors import StrategyError, StrategyNotAvailableError

__all__ = [
    "STRATEGIES",
    "Role",
    "StrategySpec",
    "available_strategies",
    "check_strategy",
    "create_strategy",
    "strategy_class",
]

Role = Literal["train", "infer", "reference", "critic"]
"""actor_train -> "train", actor_infer -> "infer", reference (frozen log-probs) -> "reference",
critic (value model, GAE) -> "critic"."""


@dataclass(frozen=True)
class StrategySpec:
    """One registered backend: where its class lives and what it needs installed."""

    name: str
    """The config's `strategy_args.strategy_name`."""
    entry_point: str
    """"module:Class", imported only by `strategy_class` / `create_strategy`."""
    roles: frozenset[str]
    """Roles the backend can serve ("train", "infer", "reference", "critic")."""
    requires: tuple[str, ...] = ()
    """Top-level modules that must be importable (checked with find_spec)."""
    extra: str | None = None
    """The roll-strategies extra that installs `requires`."""
    takes_config: bool = False
    """Whether the backend reads `strategy_config` (others reject a non-empty one)."""


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec(
            "hf_train", "roll_strategies.train.hf_train:HFTrainStrategy", frozenset({"train", "reference"})
        ),
        StrategySpec(
            "hf_infer",
            "roll_strategies.infer.hf_infer:HFInferStrategy",
            frozenset({"infer", "reference"}),
            takes_config=True,
        ),
        StrategySpec("hf_critic", "roll_strategies.train.critic:HFCriticStrategy", frozenset({"critic"})),
        StrategySpec(
            "deepspeed_train",
            "roll_strategies.train.deepspeed_train:DeepSpeedTrainStrategy",
            frozenset({"train"}),
            requires=("deepspeed",),
            extra="deepspeed",
            takes_config=True,
        ),
        StrategySpec(
            "vllm",
            "roll_strategies.infer.vllm_infer:VLLMInferStrategy",
            frozenset({"infer"}),
            requires=("vllm",),
            extra="vllm",
            takes_config=True,
        ),
    )
}
"""Every known strategy by name."""


def available_strategies(role: Role | None = None, *, installed_only: bool = False) -> list[str]:
    """Names of the strategies serving `role` (all roles when None), optionally only the installed ones."""
    return sorted(
        name
        for name, spec in STRATEGIES.items()
        if (role is None or role in spec.roles) and (not installed_only or not _missing_modules(spec))
    )


def _missing_modules(spec: StrategySpec) -> list[str]:
    return [module for module in spec.requires if importlib.util.find_spec(module) is None]


def check_strategy(name: str, role: Role) -> StrategySpec:
    """The spec of `name` for `role`, or `StrategyNotAvailableError` saying what to fix; imports nothing heavy.

    >>> check_strategy("hf_train", "train").entry_point
    'roll_strategies.train.hf_train:HFTrainStrategy'
    """
    spec = STRATEGIES.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, list(STRATEGIES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise StrategyNotAvailableError(
            f"Expected strategy_name one of {sorted(STRATEGIES)}, got {name!r}.{hint}"
        )
    if role not in spec.roles:
        raise StrategyNotAvailableError(
            f"Expected a strategy that can serve the {role!r} role ({available_strategies(role)}), got "
            f"{name!r}, which serves {sorted(spec.roles)}; set this role's strategy_args.strategy_name to one "
            "of the former."
        )
    missing = _missing_modules(spec)
    if missing:
        raise StrategyNotAvailableError(
            f"Strategy {name!r} needs {missing} installed, which this environment lacks. Install the extra: "
            f"`uv sync --all-packages --extra {spec.extra}` in the roll workspace, or "
            f"`pip install 'roll-strategies[{spec.extra}]'`; or pick one of the installed strategies "
            f"{available_strategies(role, installed_only=True)}."
        )
    return spec


def strategy_class(name: str, role: Role) -> type:
    """The backend class of `name` (after `check_strategy`), imported now."""
    spec = check_strategy(name, role)
    module_name, _, class_name = spec.entry_point.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def create_strategy(
    name: str,
    role: Role,
    model_path: str | Path,
    *,
    strategy_config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Build strategy `name` for `role` on `model_path`; `kwargs` are the backend's constructor arguments.

    `strategy_config` goes to backends that read one (deepspeed_train, vllm, hf_infer); for the others it must be
    empty. The reference role builds a frozen model (`trainable=False` for hf_train).
    """
    spec = check_strategy(name, role)
    config = dict(strategy_config or {})
    if config and not spec.takes_config:
        raise StrategyError(
            f"Expected an empty strategy_config for {name!r} (it reads none), got keys {sorted(config)}; "
            "move them to a backend that reads them (deepspeed_train, vllm, hf_infer) or drop them."
        )
    if spec.takes_config:
        kwargs["strategy_config"] = config
    if role == "reference" and name == "hf_train":
        kwargs["trainable"] = False
    return strategy_class(name, role)(model_path, **kwargs)
