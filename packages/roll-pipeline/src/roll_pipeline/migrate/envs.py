"""The `custom_envs` handler: each env tag the env managers play, its env type (`upstream.ENV_TYPES`), its episode
limits, its prompt, how much history its prompts keep, and its `env_config` key by key.

ROLL's TrajEnvManager (the default) prompts with the whole conversation and trains one sample per episode:
roll's `max_history_turns: null` (and `sample_shape: auto` then trains whole trajectories); its StepEnvManager
keeps `history_length - 1` earlier turns and trains one sample per turn. ROLL's env defaults that a file
leaves out (`upstream.ENV_DEFAULTS`: FrozenLake's slippery ice, Sokoban's 10x10 room with 4 boxes, no format
penalty) are written explicitly where roll's envs differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from roll_pipeline.migrate.load import MISSING
from roll_pipeline.migrate.report import Change
from roll_pipeline.roll_keys.rules import PROMPT_REASON, SPEED_REASON
from roll_pipeline.roll_keys.upstream import ENV_DEFAULTS, ENV_TYPES, GEM_PREFIXES

if TYPE_CHECKING:
    from roll_pipeline.migrate.translate import Keys, Migration

__all__ = ["custom_envs"]

_TRAJ = "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager"
_ANSWER = "<answer>(.*?)</answer>"
_THINK = r"<think>(.*?)</think>\s*<answer>(.*?)</answer>"
_PROMPT_KEYS = ("agent_system_template", "agent_template", "pre_step_template", "next_step_template")
_MANAGERS = {
    "VLTrajEnvManager": "vision-language episodes (images in the prompts); roll's envs and prompts are text",
    "AgentNativeStepEnvManager": "ROLL's agent-native loop (tool-calling chat messages)",
    "AgentNativeEnvManager": "ROLL's agent-native loop (tool-calling chat messages)",
    "ProxyEnvManager": "episodes played by an agent runner (agent_runner_cls) behind an LLM proxy",
    "StepConcatEnvManager": "turns concatenated into one prompt per step",
    "TirEnvManager": "tool-integrated reasoning turns",
}
"""ROLL env managers roll has no counterpart for, and what they do."""
_MANAGER_KEYS = ("history_length", "agent_runner_cls")
_SOKOBAN_ROLES = ("wall", "empty", "target", "box_on_target", "box", "player", "player_on_target")


class EnvKey(NamedTuple):
    """What becomes of one env_config key: `kind` translated / drop / approximate / unsupported."""

    kind: str
    values: dict[str, Any] | None = None
    why: str = ""


def _action_pattern(value: Any) -> EnvKey:
    if value == _ANSWER:
        return EnvKey("drop", why="roll's answer_format tags (its default) reads <answer>...</answer>")
    if value == _THINK:
        return EnvKey(
            "approximate",
            why="roll reads the <answer> after </think> but does not require a <think> block: an answer without"
            " one is no format error",
        )
    if value in ("^(.*)$", "(.*)"):
        return EnvKey("translated", {"answer_format": "raw"}, "the whole response is the action")
    return EnvKey(
        "unsupported", why=f"the answer pattern {value!r}; roll reads tags, boxed, tool_call or raw answers"
    )


def _format_penalty(value: Any) -> EnvKey:
    if value > 0:
        return EnvKey("unsupported", why=f"{value}: a bonus for an invalid answer")
    why = "ROLL adds it to the reward (negative); roll subtracts it (positive)" if value < 0 else ""
    return EnvKey("translated", {"format_penalty": -float(value) if value else 0.0}, why)


def _dim_room(value: Any) -> EnvKey:
    rows, cols = value
    return EnvKey("translated", {"dim_y": rows, "dim_x": cols}, "(rows, columns) -> dim_y, dim_x")


def _grid_lookup(value: Any) -> EnvKey:
    symbols = {_SOKOBAN_ROLES[int(k)]: v for k, v in value.items()}
    return EnvKey("translated", {"grid_vocab": symbols}, "cell id -> symbol becomes role -> symbol")


def _same(name: str) -> Callable[[Any], EnvKey]:
    return lambda value: EnvKey("translated", {name: value})


def _drop(why: str) -> Callable[[Any], EnvKey]:
    return lambda value: EnvKey("drop", why=why)


def _approximate(why: str) -> Callable[[Any], EnvKey]:
    return lambda value: EnvKey("approximate", why=why)


_COMMON: dict[str, Callable[[Any], EnvKey]] = {
    "action_pattern": _action_pattern,
    "format_penalty": _format_penalty,
    "max_steps": _same("max_steps"),
    "render_mode": _drop("roll's envs render text (and frames for GIFs)"),
    "special_token_list": _drop("roll strips special chat tokens from every answer"),
    "seed": _drop("roll seeds every episode from the run's seed"),
}
_BY_TYPE: dict[str, dict[str, Callable[[Any], EnvKey]]] = {
    "frozen_lake": {
        "is_slippery": _same("is_slippery"),
        "size": _same("size"),
        "p": _same("p"),
        "grid_lookup": _approximate("roll draws the board with its own symbols"),
        "grid_vocab": _approximate("roll names the board's symbols in its own instruction"),
        "map_lookup": _approximate("roll draws the board with its own symbols"),
        "action_lookup": _approximate("roll's actions are Left, Down, Right, Up"),
    },
    "sokoban": {
        "dim_room": _dim_room,
        "num_boxes": _same("num_boxes"),
        "search_depth": _same("search_depth"),
        "grid_lookup": _grid_lookup,
        "grid_vocab": _approximate("roll names each symbol's role in its own instruction"),
        "action_lookup": _approximate("roll's actions are Up, Down, Left, Right"),
    },
    "webshop_lite": {
        "observation_mode": lambda v: (
            _drop("text, roll's only mode")(v)
            if v == "text"
            else EnvKey("unsupported", why=f"observation_mode {v!r}: webshop_lite observes text")
        )
    },
}


def _used_tags(m: Migration) -> list[str]:
    tags: list[str] = []
    for manager in ("train_env_manager", "val_env_manager"):
        for tag in m.roll_or(["SimpleSokoban"], manager, "tags"):
            if tag not in tags:
                tags.append(tag)
    return tags


def custom_envs(m: Migration, keys: Keys, _: list[str]) -> None:
    """Every tag of `custom_envs`: migrated when an env manager plays it, else dropped."""
    m.done.add(keys)
    used = _used_tags(m)
    defined = m.file.keys_at(keys)
    for tag in defined:
        if tag in used:
            m.done.add((*keys, tag))
            _env(m, tag)
        else:
            m.claim_all((*keys, tag))
            m.drop(
                (*keys, tag),
                "a tag no env manager plays (not in train_env_manager.tags / val_env_manager.tags)",
            )
    for tag in used:
        if tag not in defined:
            m.unsupported(f"custom_envs.{tag}", "an env tag the env managers play has no custom_envs entry")


def _missing_env(env_type: Any) -> str:
    install = (
        "GEM's envs need the GEM adapter, which roll does not have yet"
        if isinstance(env_type, str) and env_type.startswith(GEM_PREFIXES)
        else "install a package that registers it (a roll_envs.envs entry point)"
    )
    return (
        f"no roll env is registered as {env_type!r} (roll has {sorted({t for t, _ in ENV_TYPES.values()})} of ROLL's"
        f" env types): {install}, or write one (roll_envs.BaseEnv: packages/roll-envs/README.md#write-your-own-env)"
        " and register it under this id; kept as is, env_config passed through unchanged"
    )


def _env(m: Migration, tag: str) -> None:
    base, out = ("custom_envs", tag), f"custom_envs.{tag}"
    env_type = m.roll_or("", *base, "env_type")
    target, why = ENV_TYPES.get(env_type, (None, ""))
    m.set(f"{out}.env_type", target or env_type)
    if target is None:
        m.unsupported((*base, "env_type"), _missing_env(env_type))
    elif why:
        m.approximate((*base, "env_type"), f"{env_type!r} -> {why}")
    else:
        m.translate((*base, "env_type"), f"{out}.env_type", env_type, target)
    _history(m, tag)
    for source_key, key in (
        ("max_steps", "max_actions_per_traj"),
        ("max_tokens_per_step", "max_tokens_per_step"),
    ):
        if m.present(*base, source_key):
            value = m.value_or_refuse((*base, source_key))
            if value is not MISSING:
                m.translate((*base, source_key), f"{out}.{key}", value, value)
    _env_config(m, tag, target, str(env_type))
    for child in m.file.keys_at(base):
        path = (*base, child)
        if path in m.done:
            continue
        m.claim_all(path)
        _env_option(m, path, child)


def _env_option(m: Migration, path: Keys, child: str) -> None:
    if child in _PROMPT_KEYS:
        m.approximate(path, PROMPT_REASON)
    elif child in ("use_thread_lock", "max_env_step_concurrent"):
        m.drop(path, SPEED_REASON)
    elif child == "agent_runner_cls" and m.roll(*path) is None:
        m.drop(path, "null: ROLL's default agent loop")
    elif child == "agent_runner_cls":
        m.unsupported(path, "a custom agent loop (ROLL's agent runner class)")
    elif child == "env_instruction":
        value = m.roll(*path)
        m.translate(
            path, f"custom_envs.{path[1]}.env_instruction", value, value, "roll makes it the system prompt"
        )
    elif child == "tool_wrapper":
        m.unsupported(
            path, "tools (Python, search, MCP) wrapped around the env; roll's envs take no tool wrapper"
        )
    else:
        m.unsupported(path, f"an option of ROLL's env managers ({child}) roll does not have")


def _history(m: Migration, tag: str) -> None:
    base, key = ("custom_envs", tag), f"custom_envs.{tag}.max_history_turns"
    manager = m.roll_or(_TRAJ, *base, "env_manager_cls")
    short = str(manager).rsplit(".", 1)[-1]
    if short == "TrajEnvManager":
        history, why = (
            None,
            "the whole conversation in every prompt, one sample per episode (sample_shape auto)",
        )
    elif short == "StepEnvManager":
        length = m.roll_or(None, *base, "history_length")
        history = max(int(length) - 1, 0) if length else 0
        why = f"history_length {length}: the {history} turn(s) before the current one, one sample per turn"
    else:
        what = _MANAGERS.get(short, "a custom env manager")
        m.unsupported(
            (*base, "env_manager_cls"),
            f"{short}: {what}; roll plays envs as ROLL's TrajEnvManager / StepEnvManager",
        )
        for key in _MANAGER_KEYS:
            if m.present(*base, key):
                m.claim_all((*base, key))
                m.drop((*base, key), f"read by {short}")
        return
    if m.present(*base, "env_manager_cls"):
        m.translate((*base, "env_manager_cls"), key, short, history, why)
    else:
        m.set(key, history)
        m.report.defaults.append(
            Change("(default)", key, history, history, f"ROLL's {short}: {why}", roll_default=0)
        )
    if m.present(*base, "history_length"):
        m.done.add((*base, "history_length"))
        m.report.translated.append(Change(f"custom_envs.{tag}.history_length", key))


def _env_config(m: Migration, tag: str, target: str | None, env_type: str) -> None:
    base, out = ("custom_envs", tag, "env_config"), f"custom_envs.{tag}.env_config"
    children = m.file.keys_at(base)
    m.done.add(base)
    known = {**_COMMON, **_BY_TYPE.get(target or "", {})}
    for child in children:
        path = (*base, child)
        m.claim_all(path)
        value = m.value_or_refuse(path)
        if value is MISSING:
            continue
        if target is None:
            m.translate(path, f"{out}.{child}", value, value)
        elif child == "env_instruction":
            why = "ROLL puts it before the first observation; roll makes it the system prompt"
            m.translate(path, f"custom_envs.{tag}.env_instruction", value, value, why)
        elif child in known:
            _apply_env_key(m, path, out, known[child](value), value)
        else:
            m.unsupported(
                path, f"an env_config key of ROLL's {env_type} env that roll's {target} does not have"
            )
    for key, value in ENV_DEFAULTS.get(env_type, {}).items():
        if key not in children:
            for name, converted in (known[key](value).values or {}).items():
                if converted != _roll_env_default(target, name):
                    m.set(f"{out}.{name}", converted)
                    m.report.defaults.append(
                        Change(
                            "(default)",
                            f"{out}.{name}",
                            value,
                            converted,
                            f"ROLL's {env_type} default",
                            roll_default=_roll_env_default(target, name),
                        )
                    )


def _apply_env_key(m: Migration, path: Keys, out: str, result: EnvKey, value: Any) -> None:
    if result.kind == "translated":
        for name, converted in (result.values or {}).items():
            m.set(f"{out}.{name}", converted)
        values = result.values or {}
        names = ", ".join(f"{out}.{n}" for n in values)
        m.report.translated.append(Change(".".join(path), names))
        shown = next(iter(values.values())) if len(values) == 1 else values
        if result.why or list(values.values()) != [value]:
            m.report.converted.append(Change(".".join(path), names, value, shown, result.why))
    elif result.kind == "drop":
        m.drop(path, result.why)
    elif result.kind == "approximate":
        m.approximate(path, result.why)
    else:
        m.unsupported(path, result.why)


def _roll_env_default(env_id: str | None, name: str) -> Any:
    """roll's default of env config field `name` for env `env_id` (its registration's defaults first)."""
    import roll_envs

    if env_id is None:
        return MISSING
    spec = roll_envs.spec(env_id)
    if name in spec.defaults:
        return spec.defaults[name]
    model = spec.config_model()
    field = model.model_fields.get(name) if model is not None else None
    return MISSING if field is None else field.get_default(call_default_factory=True)
