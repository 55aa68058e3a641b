"""Checks of a config that its schema cannot make: run by `roll config` and `roll train` before any
worker, model or Ray instance starts, so a bad value fails in a second instead of minutes later.

- each `custom_envs.<tag>.env_type` is a registered env (with the registered list and a did-you-mean);
- each `env_config` validates against that env's own pydantic config (unknown keys are errors); an
  `openai_agent` tag's agent loads and its task env passes the same checks;
- each `fixed_players` names seats of a multi-player env and fixed policies it offers;
- `resume_from_checkpoint` exists, is complete and verifies against its manifest;
- `pretrain` is `builtin:NAME` of a known tiny model, a local model folder, or a Hugging Face hub id that
  is in the local Hugging Face cache (or, online, on the hub);
- each of `actor_infer.generating_args.stop_strings` is non-empty and producible by the model's own
  tokenizer (only the tokenizer is loaded);
- each role's `strategy_name` is a registered backend for that role whose extra is installed
  (`roll_pipeline.config.strategies.strategy_problems`);
- with `share_prefix` (the default) the model's architecture honours a prefix tree's attention mask: a small
  random instance built from the model folder's config.json is probed as the strategies probe the loaded model;
- `cluster.backend=ray` (the default) has Ray installed (the `roll-pipeline[ray]` extra);
- with `demonstration_steps`, the env of each tag they play (`demonstration_env_manager`, else the training
  envs) demonstrates (`BaseEnv.demonstration` answers after a reset, and the answer starts with the tag's
  `response_prefix`).

The checks read the raw composed config (a mapping), so they run even when the schema rejects other
values, and `compose(..., preflight=True)` reports every problem, of the schema or of these checks, in one
`ConfigError`. The model's checks (`pretrain`, the stop strings, `share_prefix`) are `models/model_checks.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roll_rollout import RolloutError
from roll_rollout.hosting.env_kinds import env_kind

from roll_pipeline.config.compose import compose_data, raw_section, validate
from roll_pipeline.config.envs import CustomEnvConfig
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.models.model_checks import check_pretrain, check_share_prefix, check_stop_strings

__all__ = [
    "check_cluster_backend",  # cluster.backend=ray needs Ray installed
    "check_demonstrations",  # demonstration_steps: every training env demonstrates
    "check_env_configs",  # env_type registered, env_config valid for that env
    "check_pretrain",  # builtin:NAME, a local model folder, or a cached/fetchable hub id
    "check_resume",  # the checkpoint exists and verifies
    "check_share_prefix",  # share_prefix: the model's architecture takes a prefix tree
    "check_stop_strings",  # stop strings non-empty and producible by the model's tokenizer
    "compose",  # Hydra compose + validation, with these checks when preflight=True
    "preflight_problems",  # every check above on a raw config mapping
]


def compose(
    config_path: str | None,
    config_name: str | None,
    overrides: list[str],
    search_from: Path | None = None,
    *,
    preflight: bool = False,
) -> AgenticConfig:
    """Compose with Hydra and validate (`preflight`: also check envs, checkpoint and model folder); raise
    `ConfigError` listing every problem."""
    data = compose_data(config_path, config_name, overrides, search_from)
    more = preflight_problems(data) if preflight and isinstance(data, dict) else []
    return validate(data, more_problems=more)


def check_env_configs(custom_envs: Any) -> list[str]:
    """One problem per tag whose kind rejects its `env_config` (`roll_rollout.hosting.env_kinds`: an agent that does not
    load), or whose played env's `env_type` is not registered or whose config the env rejects."""
    if not isinstance(custom_envs, Mapping):
        return []  # the schema reports the wrong type
    problems = []
    for tag, entry in custom_envs.items():
        if not isinstance(entry, Mapping):
            continue
        env_type = entry.get("env_type", CustomEnvConfig.model_fields["env_type"].default)
        env_config = entry.get("env_config") or {}
        where, kind = f"custom_envs.{tag}", env_kind(env_type)
        try:
            kind.preflight(env_config)
            played_type, played_config = kind.played_env(env_type, env_config)
        except RolloutError as exc:
            problems.append(f"{where}.env_config: {exc}")
            continue
        fixed = None if kind.agent_plays else entry.get("fixed_players")
        problems += _roll_env_problems(played_type, played_config, fixed, where, f"{where}{kind.played_at}")
    return problems


def _roll_env_problems(env_type: str, env_config: Any, fixed: Any, where: str, at: str) -> list[str]:
    """The problems of a roll env's type, config and fixed players; `at` prefixes its fields in the tag."""
    import roll_envs
    from roll_envs.config import build_config

    try:
        spec = roll_envs.spec(env_type)
        model = spec.config_model()
    except roll_envs.RollEnvsError as exc:  # unknown id, or an entry point that does not load
        return [f"{at}env_type={env_type!r}: {exc}"]
    if model is None or not isinstance(env_config, Mapping):
        return []
    try:
        build_config(model, {**spec.defaults, **env_config}, {}, env_name=spec.id)
    except roll_envs.EnvConfigError as exc:
        return [f"{at}env_config: {exc}".replace("\n", "\n    ")]
    return _fixed_players_problems(env_type, env_config, fixed, where)


def _fixed_players_problems(
    env_type: str, env_config: Mapping[str, Any], fixed: Any, where: str
) -> list[str]:
    """`fixed_players` names the env's seats and fixed policies (the env is built to ask it)."""
    import roll_envs
    from roll_rollout import SeatsError, check_fixed_players

    if not fixed or not isinstance(fixed, Mapping):
        return []  # none, or the schema reports the wrong type
    try:
        check_fixed_players(roll_envs.make(env_type, render_mode=None, **env_config), fixed, where)
    except SeatsError as exc:
        return [str(exc).replace(f"{where}: ", f"{where}.", 1)]
    return []


def check_resume(resume_from_checkpoint: Any) -> list[str]:
    """A problem if `resume_from_checkpoint` is set and does not verify (see `checkpoint.verify_checkpoint`)."""
    from roll_pipeline.state.checkpoint import CheckpointError, verify_checkpoint

    if not resume_from_checkpoint or not isinstance(resume_from_checkpoint, str):
        return []
    if resume_from_checkpoint == "auto":  # the newest that verifies, or none: nothing can be wrong yet
        return []
    try:
        verify_checkpoint(Path(resume_from_checkpoint).expanduser())
    except CheckpointError as exc:
        return [f"resume_from_checkpoint={resume_from_checkpoint!r}: {exc}"]
    return []


def check_cluster_backend(cluster: Any) -> list[str]:
    """A problem if the run would start Ray workers (`cluster.backend=ray`, the default) and Ray is not installed."""
    from roll_pipeline.runtime.cluster import MISSING_RAY, ray_installed

    default = AgenticConfig.model_fields["cluster"].get_default(call_default_factory=True).backend
    if raw_section(cluster).get("backend", default) != "ray" or ray_installed():
        return []
    return [MISSING_RAY]


def preflight_problems(data: Mapping[str, Any]) -> list[str]:
    """Every problem the checks above find in a raw config mapping (missing keys take the defaults)."""
    gguf = raw_section(data, "actor_train", "model_args").get("gguf_file")
    from roll_pipeline.config.strategies import strategy_problems

    return [
        *check_env_configs(data.get("custom_envs")),
        *check_resume(data.get("resume_from_checkpoint")),
        *check_pretrain(data.get("pretrain", AgenticConfig.model_fields["pretrain"].default), gguf),
        *_stop_string_problems(data, gguf),
        *strategy_problems(data),
        *check_share_prefix(
            data.get("share_prefix", AgenticConfig.model_fields["share_prefix"].default),
            data.get("pretrain", AgenticConfig.model_fields["pretrain"].default),
            gguf,
        ),
        *check_cluster_backend(data.get("cluster")),
        *check_demonstrations(data),
    ]


def check_demonstrations(data: Mapping[str, Any]) -> list[str]:
    """With `demonstration_steps` > 0: one problem per tag the demonstration steps play
    (`AgenticConfig.demonstration_envs`) whose env gives no demonstration after a
    reset (seed 0), or one that does not start with the tag's `response_prefix`; an `openai_agent` tag's task
    env demonstrates, as calls of its `demonstration_tool`, which it must name."""
    import roll_envs
    from pydantic import ValidationError

    steps = data.get("demonstration_steps", 0)
    if not isinstance(steps, int) or steps <= 0:
        return []
    try:
        cfg = AgenticConfig.model_validate(data)
    except ValidationError:
        return []  # the schema reports it
    problems = []
    for tag in dict.fromkeys(cfg.demonstration_envs.tags):
        spec, where = (
            cfg.custom_envs[tag],
            f"demonstration_steps={steps}: custom_envs.{tag} ({cfg.custom_envs[tag].env_type})",
        )
        fix = "set demonstration_steps: 0, or give the env a demonstration() (docs/envs/README.md)"
        env_type, env_config, prefix = spec.env_type, spec.env_config, spec.response_prefix
        if env_kind(env_type).agent_plays:  # the task env demonstrates, as calls of the agent's tool
            if not spec.env_config.get("demonstration_tool"):
                problems.append(
                    f"{where}: name the agent's tool a demonstrated action is a call of, env_config."
                    "demonstration_tool: {name: <tool>, argument: <its parameter>} (docs/openai_agent.md); or"
                    " set demonstration_steps: 0"
                )
                continue
            env_type, env_config = (
                spec.env_config.get("task_env"),
                spec.env_config.get("task_env_config") or {},
            )
            prefix = ""
        try:
            env = roll_envs.make(env_type, render_mode=None, **env_config)
        except Exception:  # check_env_configs reports a bad env type or config
            continue
        try:
            env.reset(seed=0)
            demonstrate = getattr(env, "demonstration", None)
            answer = demonstrate() if callable(demonstrate) else None
        finally:
            env.close()
        if not isinstance(answer, str):
            problems.append(
                f"{where} gives no demonstration (demonstration() after a reset: {answer!r:.60}); {fix}"
            )
        elif not answer.startswith(prefix):
            problems.append(
                f"{where}: its demonstration {answer!r:.60} does not start with response_prefix"
                f" {prefix!r}, which the prompt already holds; drop the prefix or make it the start"
                " of the env's answer format"
            )
    return problems


def _stop_string_problems(data: Mapping[str, Any], train_gguf: Any) -> list[str]:
    """`check_stop_strings` on the sampling role's stop strings (the schema's default when unset) and model."""
    from roll_pipeline.config.roles import GeneratingArgs

    gguf = raw_section(data, "actor_infer", "model_args").get("gguf_file")
    default = GeneratingArgs.model_fields["stop_strings"].get_default(call_default_factory=True)
    return check_stop_strings(
        raw_section(data, "actor_infer", "generating_args").get("stop_strings", default),
        data.get("pretrain", AgenticConfig.model_fields["pretrain"].default),
        gguf or train_gguf,
    )
