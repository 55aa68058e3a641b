"""Hydra at the edge: compose YAML + overrides, then validate into `AgenticConfig`.

Both flag spellings of the upstream docs are accepted (`--config_path/--config_name` and
`--config-path/--config-name`), with Hydra overrides such as `exp_name=my_run seed=123` before or after
the flags. `roll_pipeline.preflight.compose(..., preflight=True)` (what `roll config` and `roll train` use)
also checks the composed config against the env registry, the checkpoint and the model folder, and reports
every problem, of the schema or of these checks, in one `ConfigError`.
Two base configs are registered with Hydra: `roll_defaults` (the defaults of `AgenticConfig`, set for a
pretrained instruct model) and `roll_tiny` (those with the builtin tiny models' recipe on top,
`config.tiny_recipe`). YAML files start with `defaults: [roll_defaults, _self_]` (or `roll_tiny`) and override
only what they change. Without a config file `roll_tiny` is composed, unless an override names a `pretrain`
that is not a builtin model: that model gets `roll_defaults`.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from roll_pipeline.config.schema import AgenticConfig, default_values
from roll_pipeline.config.tiny_recipe import TINY_RECIPE, merged


class ConfigError(ValueError):
    """A config file or override is wrong; the message says which key and how to fix it."""


def parse_args(
    argv: list[str] | None,
    prog: str = "roll train",
    description: str = "Train an LLM agent with RL (agentic pipeline).",
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """`--config-path/--config_path`, `--config-name/--config_name` and Hydra overrides, in any order;
    `extra` adds a command's own options."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--config-path",
        "--config_path",
        dest="config_path",
        default=None,
        help="folder of YAML configs (relative to the current folder or to examples/)",
    )
    parser.add_argument(
        "--config-name",
        "--config_name",
        dest="config_name",
        default=None,
        help="YAML file name in that folder, without .yaml",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    if extra is not None:
        extra(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. exp_name=my_run seed=123")
    return parser.parse_intermixed_args(argv)


def defaults_node() -> dict[str, Any]:
    """The Hydra config `roll_defaults`: `AgenticConfig`'s defaults (`schema.default_values`)."""
    return default_values()


def tiny_node() -> dict[str, Any]:
    """The Hydra config `roll_tiny`: the defaults with the builtin tiny models' recipe on top."""
    return merged(default_values(), TINY_RECIPE)


def tiny_config(**overrides: Any) -> AgenticConfig:
    """The config of `roll train` with no config file (the tiny recipe, `roll_tiny`), with `overrides` merged in
    key by key: its Python spelling, e.g. `tiny_config(max_steps=20, custom_envs={"FrozenLake": {...}})`."""
    return AgenticConfig.model_validate(merged(tiny_node(), overrides))


def base_config_name(overrides: list[str]) -> str:
    """The config composed without a config file: `roll_tiny`, or `roll_defaults` when an override sets
    `pretrain` to a model that is not builtin (a real model gets the defaults made for it)."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "pretrain" and value and not value.startswith("builtin:"):
            return "roll_defaults"
    return "roll_tiny"


def compose(
    config_path: str | None,
    config_name: str | None,
    overrides: list[str],
    search_from: Path | None = None,
) -> AgenticConfig:
    """Compose with Hydra and validate; raise `ConfigError` listing every problem (`roll_pipeline.preflight`
    adds the checks of envs, checkpoint and model folder)."""
    return validate(compose_data(config_path, config_name, overrides, search_from))


def raw_section(data: Any, *keys: str) -> Mapping[str, Any]:
    """The mapping at `keys` in raw config data (`compose_data`); empty where a level is missing or no mapping
    (the schema reports a wrong type)."""
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data if isinstance(data, Mapping) else {}


def compose_data(
    config_path: str | None,
    config_name: str | None,
    overrides: list[str],
    search_from: Path | None = None,
) -> Any:
    """The composed, resolved config as plain data, not yet validated; `ConfigError` for a config that does
    not compose."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    _refuse_roll_config(config_path, config_name, search_from)
    _check_antlr_runtime()
    bad_keys = override_key_problems(overrides)
    if bad_keys:  # before Hydra, whose own message ("Could not override ...") names no valid key
        raise ConfigError("\n".join([f"{len(bad_keys)} problem(s) in the config:", *bad_keys]))
    ConfigStore.instance().store(name="roll_defaults", node=defaults_node())
    ConfigStore.instance().store(name="roll_tiny", node=tiny_node())
    if config_path is not None and config_name is None:
        raise ConfigError("--config-path needs --config-name (the YAML file name without .yaml)")
    directory = _find_config_dir(config_path, search_from) if config_path else Path.cwd()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            cfg = hydra_compose(
                config_name=config_name or base_config_name(overrides), overrides=list(overrides)
            )
    except Exception as exc:  # hydra raises several types; all mean "your config/overrides are wrong"
        raise ConfigError(f"could not compose the config: {exc}") from exc
    return _resolved(cfg)


HYDRA_ANTLR = "4.9"
"""The antlr4 runtime series Hydra's override grammar was generated with (Hydra 1.3)."""


def _check_antlr_runtime() -> None:
    """A `ConfigError` with the fix when another package (gem-llm, through math-verify) replaced Hydra's antlr4
    runtime: Hydra's override parser would fail with "Could not deserialize ATN with version 3 (expected 4)"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("antlr4-python3-runtime")
    except PackageNotFoundError:
        return  # Hydra's own import reports a missing runtime
    if not found.startswith(HYDRA_ANTLR + "."):
        raise ConfigError(
            f"antlr4-python3-runtime {found} is installed, but Hydra (roll's config parser) needs {HYDRA_ANTLR}.x;"
            " another package pulled it in (gem-llm does, through math-verify). Fix: pip install"
            f" 'antlr4-python3-runtime=={HYDRA_ANTLR}.3' (math-verify's LaTeX parser works with it too; in a uv"
            ' project: [tool.uv] override-dependencies = ["antlr4-python3-runtime==4.9.3"], docs/envs/gem.md)'
        )


def _resolved(cfg: Any) -> Any:
    """The composed config as plain data; an interpolation that does not resolve (an unset `${oc.env:VAR}`)
    is a ConfigError naming the key and the variable."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        where = f"{key}: " if key else ""
        raise ConfigError(
            f"1 problem(s) in the config:\n  - {where}{describe_resolution_error(exc)}"
        ) from None


ENV_VAR_ERROR = re.compile(r"Environment variable '([^']+)' not found")
"""OmegaConf's message for an unset `${oc.env:VAR}`."""


def describe_resolution_error(exc: Exception) -> str:
    """A one-line reason for an interpolation that did not resolve, naming an unset environment variable."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    found = ENV_VAR_ERROR.search(str(exc))
    if found:
        name = found.group(1)
        return (
            f"environment variable {name} is not set (`${{oc.env:{name}}}`); export {name}=... or give a"
            f" default: ${{oc.env:{name},VALUE}}"
        )
    return f"interpolation does not resolve: {text}"


def _refuse_roll_config(config_path: str | None, config_name: str | None, search_from: Path | None) -> None:
    """A ConfigError with the `roll migrate` command when the named config file is one of ROLL's."""
    if config_path is None or config_name is None:
        return
    from roll_pipeline.roll_keys.detect import roll_config_message, roll_markers

    file = _find_config_dir(config_path, search_from) / f"{config_name.removesuffix('.yaml')}.yaml"
    markers = roll_markers(file, set(AgenticConfig.model_fields)) if file.is_file() else []
    if markers:
        raise ConfigError(roll_config_message(file, markers))


CLOSE_MATCH = 0.75
"""How similar (difflib ratio) a valid key must be to an unknown one to be suggested: 0.75 offers
`max_step` -> `max_steps`, not `logging_dir` -> `logging_steps` (0.67) or `model_type` -> `dtype` (0.67)."""


def key_suggestion(path: tuple[str, ...], valid: list[str]) -> str:
    """What to say after `unknown key PATH`: roll's name when PATH is a ROLL key (roll_pipeline.roll_keys.rules),
    else `; did you mean ...?` with the valid keys close to it, else nothing."""
    from roll_pipeline.roll_keys.hints import hint_for

    hint = hint_for(path)
    if hint:
        return f" ({hint})"
    close = difflib.get_close_matches(path[-1], valid, n=3, cutoff=CLOSE_MATCH)
    return f"; did you mean {', '.join(repr(h) for h in close)}?" if close else ""


def validate(data: Any, *, more_problems: Sequence[str] = ()) -> AgenticConfig:
    """`AgenticConfig.model_validate` with errors that name the key, suggest fixes and list valid keys, and
    `more_problems` found by other checks of the same data (`roll_pipeline.preflight`), all in one
    `ConfigError`."""
    problems: list[str] = []
    config = None
    try:
        config = AgenticConfig.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc)
    problems += [f"  - {problem}" for problem in more_problems]
    if problems or config is None:
        raise ConfigError("\n".join([f"{len(problems)} problem(s) in the config:", *problems]))
    return config


def override_key_problems(overrides: list[str]) -> list[str]:
    """One `  - unknown key ...` line (with the nearest valid keys) per override whose key is not in the schema.

    `+`, `++` and `~` prefixes are allowed; below a free-form mapping key (a `custom_envs` tag) the walk goes
    on into the mapping's value model, and it stops at free-form values (`env_config`, `strategy_config`),
    which the env's own config and preflight check later.
    """
    lines = []
    for override in overrides:
        parts = [p for p in override.split("=", 1)[0].lstrip("+~").strip().split(".") if p]
        annotation: Any = AgenticConfig
        for i, part in enumerate(parts):
            annotation = _unwrap(annotation)
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                field = annotation.model_fields.get(part)
                if field is None:
                    valid = sorted(annotation.model_fields)
                    lines.append(
                        f"  - unknown key '{'.'.join(parts[: i + 1])}' (override {override!r})"
                        + key_suggestion(tuple(parts[: i + 1]), valid)
                        + f" Valid keys here: {', '.join(valid)}"
                    )
                    break
                annotation = field.annotation
            elif get_origin(annotation) is dict:
                annotation = get_args(annotation)[1]  # any key of the mapping; its value's schema next
            else:
                break
    return lines


def validation_problems(exc: ValidationError) -> list[str]:
    """One `  - ...` line per schema error: where, what, and a suggestion for unknown keys."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parent = err["loc"][:-1]
            valid = sorted(_fields_at(parent))
            lines.append(
                f"  - unknown key '{loc}'"
                + key_suggestion(tuple(str(p) for p in err["loc"]), valid)
                + (f" Valid keys here: {', '.join(valid)}" if valid else "")
            )
        elif (
            not loc and err["type"] == "value_error"
        ):  # cross-field checks: one problem per line, no input dump
            message = str(err["msg"]).removeprefix("Value error, ")
            lines += [f"  - {line}" for line in message.splitlines()]
        else:
            lines.append(f"  - {loc or '(top level)'}: {err['msg']} (got {err.get('input')!r})")
    return lines


def _fields_at(path: tuple[Any, ...]) -> set[str]:
    """Field names of the model found by walking `path` from AgenticConfig (empty if not a model)."""
    annotation: Any = AgenticConfig
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return set()
            annotation = field.annotation
        elif get_origin(annotation) is dict:  # custom_envs.<tag>: step into the value type
            annotation = get_args(annotation)[1]
        else:
            return set()
    annotation = _unwrap(annotation)
    return (
        set(annotation.model_fields)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel)
        else set()
    )


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _find_config_dir(config_path: str, search_from: Path | None) -> Path:
    candidates = [Path(config_path)]
    if search_from is not None:
        candidates.append(search_from / config_path)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise ConfigError(f"config folder {config_path!r} not found (tried {tried})")
