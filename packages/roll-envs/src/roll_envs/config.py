"""Env configs: pydantic models with `extra="forbid"`, validated into errors that say how to fix them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roll_envs.errors import EnvConfigError, did_you_mean
from roll_envs.parsing import AnswerFormat


def turns_field(
    default: int,
    description: str = "turns (calls to step) before the episode is truncated",
    le: int = 100_000,
) -> Any:
    """The `max_steps` field with an env's own default (and, where given, its own wording and bound)."""
    return Field(default, ge=1, le=le, description=description)


class EnvConfig(BaseModel):
    """Fields every env shares; an env's own config subclasses this and adds its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = turns_field(10)
    format_penalty: float = Field(
        0.0, ge=0.0, description="subtracted from the reward of a turn whose answer is not a valid action"
    )
    max_actions_per_turn: int = Field(
        1,
        ge=1,
        le=64,
        description="actions a turn may chain with '||' (a tool call: a JSON list); extra ones are dropped."
        " At 1, '||' is part of the answer",
    )
    answer_format: AnswerFormat = Field(
        AnswerFormat.TAGS,
        description="how the answer is read from a turn: 'tags' (<answer>...</answer>), 'boxed' (\\boxed{...}),"
        " 'tool_call' (a JSON tool call) or 'raw' (the whole text after </think>)",
    )


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def build_config(
    config_cls: type[ConfigT],
    config: BaseModel | Mapping[str, Any] | None,
    overrides: Mapping[str, Any],
    env_name: str,
) -> ConfigT:
    """Validate `config` (model, mapping or None) updated with `overrides` into a `config_cls` instance.

    Raises:
        EnvConfigError: naming the env, each bad field, what it got and the allowed fields or values.
    """
    if isinstance(config, config_cls) and not overrides:
        return config
    if config is None:
        data: dict[str, Any] = {}
    elif isinstance(config, BaseModel):
        data = config.model_dump(exclude_unset=True)
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise EnvConfigError(
            f"env {env_name!r}: config must be a {config_cls.__name__}, a mapping or None; "
            f"got {type(config).__name__}. Fix: pass keyword arguments, e.g. make({env_name!r}, max_steps=10)."
        )
    data.update(overrides)
    try:
        return config_cls.model_validate(data)
    except ValidationError as exc:
        raise EnvConfigError(describe_validation_error(exc, config_cls, env_name)) from None


def describe_validation_error(exc: ValidationError, config_cls: type[BaseModel], env_name: str) -> str:
    """One line per pydantic error: the field, the value received, and the fix."""
    fields = config_cls.model_fields
    lines = [f"invalid config for env {env_name!r} ({config_cls.__name__}):"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<config>"
        head = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            lines.append(
                f"  - unknown field {loc!r}.{did_you_mean(head, fields)} "
                f"Allowed fields: {', '.join(sorted(fields))}."
            )
            continue
        desc = fields[head].description if head in fields else None
        hint = f" ({desc})" if desc else ""
        lines.append(f"  - field {loc!r}{hint}: got {err.get('input')!r}; {err['msg']}.")
    return "\n".join(lines)
