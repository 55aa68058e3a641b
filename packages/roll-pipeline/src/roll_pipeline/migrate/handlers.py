"""Handlers of the rules whose ROLL keys need more than a rename: sampling (which generating_args ROLL samples
with), lengths, trackers, backends (Megatron / FSDP2 -> DeepSpeed), mini-batch sizes across data-parallel
ranks, and the worker sections a run does not use. `FIRST` run before the walk (other rules depend on what
they decide); `HANDLERS` are the per-key ones `rules.RULES` names; `finish` runs last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roll_pipeline.migrate import algo
from roll_pipeline.migrate.envs import custom_envs
from roll_pipeline.migrate.load import MISSING, parse_device_mapping
from roll_pipeline.roll_keys.rules import SPEED_REASON, TRAINED, match_rule
from roll_pipeline.roll_keys.upstream import STRATEGIES

if TYPE_CHECKING:
    from roll_pipeline.migrate.translate import Keys, Migration

__all__ = ["FIRST", "HANDLERS", "finish"]

_WANDB_KEYS = ("project", "entity", "name", "tags", "notes", "mode", "group", "job_type")
_SAMPLERS = (("actor_infer", "generating_args"), ("train_env_manager", "generating_args"))


def generating(m: Migration) -> None:
    """ROLL samples with actor_infer.generating_args when it is set, else with train_env_manager's (and then
    validates with val_env_manager's); roll samples with actor_infer's and validates greedily."""
    primary = next((keys for keys in _SAMPLERS if m.file.keys_at(keys)), None)
    m.sampling_section = primary
    if primary is None:
        m.unsupported("generating_args", "ROLL needs generating_args in actor_infer or train_env_manager")
        return
    m.done.add(primary)
    m.walk(primary, rule_prefix=("generating_args",))
    for keys in (*_SAMPLERS, ("val_env_manager", "generating_args")):
        if keys == primary or not m.present(*keys):
            continue
        m.claim_all(keys)
        if keys[0] == "val_env_manager" and primary[0] != "actor_infer":
            m.approximate(
                keys, "roll validates greedily; ROLL samples validation episodes with these settings"
            )
        else:
            m.drop(keys, f"ROLL replaces it with {'.'.join(primary)}")
    if not m.present("val_env_manager", "generating_args") or primary[0] == "actor_infer":
        m.approximate(
            "validation sampling",
            f"roll validates greedily; ROLL samples validation episodes with {'.'.join(primary)}",
        )


def sequence_length(m: Migration) -> None:
    """sequence_length, or prompt_length + response_length; validation lengths."""
    seq, resp = m.roll("sequence_length"), m.roll("response_length")
    if seq not in (MISSING, None):
        m.translate(("sequence_length",), "sequence_length", seq, seq)
        for key in ("prompt_length", "response_length"):
            if m.present(key):
                m.drop((key,), "ROLL reads it only without sequence_length")
    elif resp not in (MISSING, None):
        prompt = m.roll_or(1024, "prompt_length")
        m.translate(
            ("response_length",),
            "sequence_length",
            resp,
            prompt + resp,
            f"prompt_length {prompt} + response_length",
        )
        if m.present("prompt_length"):
            m.report.translated.append(_named("prompt_length", "sequence_length"))
            m.done.add(("prompt_length",))
    else:
        m.unsupported("sequence_length", "ROLL needs sequence_length (or response_length)")
    for key in ("val_prompt_length", "val_sequence_length"):
        value = m.roll(key)
        if m.present(key) and value not in (None, seq):
            m.approximate((key,), "roll validates with sequence_length")
        elif m.present(key):
            m.drop((key,), "the same as the training length")


def _named(source_key: str, key: str) -> Any:
    from roll_pipeline.migrate.report import Change

    return Change(source_key, key)


def tracker_kwargs(m: Migration, keys: Keys, _: list[str]) -> None:
    """wandb.init arguments pass through for a W&B run; a TensorBoard log_dir is the run folder in roll."""
    tracker = m.roll_or("tensorboard", "track_with")
    trackers = tracker if isinstance(tracker, list) else [tracker]
    children = m.file.keys_at(keys)
    m.done.add(keys)
    if not children:
        m.drop(keys, "empty")
    for child in children:
        path = (*keys, child)
        if "wandb" in trackers and child in _WANDB_KEYS:
            value = m.value_or_refuse(path)
            if value is not MISSING:
                m.translate(path, f"tracker_kwargs.{child}", value, value)
        elif child == "api_key":
            m.drop(path, "a secret; W&B reads it from the environment: export WANDB_API_KEY")
        elif child == "log_dir":
            m.drop(path, "roll writes TensorBoard events in the run folder (output_dir/exp_name/tensorboard)")
        else:
            m.drop(
                path, f"an argument of ROLL's {'/'.join(map(str, trackers))} tracker that roll does not pass"
            )


def reward_pretrain(m: Migration, keys: Keys, _: list[str]) -> None:
    """Only ROLL's critic loads reward_pretrain; roll's critic starts from pretrain."""
    value = m.roll(*keys)
    if m.uses_critic and value not in (None, MISSING, m.roll("pretrain")):
        m.unsupported(
            keys, "a critic initialised from another model than pretrain; roll's critic starts from pretrain"
        )
    else:
        m.drop(
            keys,
            "only ROLL's critic reads it"
            + ("" if m.uses_critic else " (no critic: the estimator needs none)"),
        )


def role_section(m: Migration, keys: Keys, _: list[str]) -> None:
    """reference / critic: migrated when the run uses them, else dropped whole."""
    used = m.uses_reference if keys[0] == "reference" else m.uses_critic
    if used:
        m.done.add(keys)
        m.walk(keys)
        return
    m.claim_all(keys)
    why = (
        "no KL term is on (use_kl_loss with kl_loss_coef > 0, or add_token_level_kl), so roll loads no reference"
        if keys[0] == "reference"
        else "the estimator needs no critic"
    )
    m.drop(keys, why)


def _strategy_config(m: Migration, role: str) -> dict[str, Any]:
    config = m.roll(role, "strategy_args", "strategy_config")
    return config if isinstance(config, dict) else {}


def dp_size(m: Migration, role: str) -> int:
    """ROLL's data-parallel size of a trained role: its GPUs over the model-parallel ones."""
    devices = parse_device_mapping(m.roll_or(None, role, "device_mapping")) or []
    name = m.roll_or("", role, "strategy_args", "strategy_name")
    config = _strategy_config(m, role)
    split = 1
    if str(name).startswith("megatron"):
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            split *= int(config.get(key) or 1)
    elif str(name).startswith("fsdp2"):
        split = int(m.roll_or(1, role, "model_args", "ulysses_size"))
    return max(len(devices) // split, 1)


def strategy(m: Migration, keys: Keys, _: list[str]) -> None:
    """A worker's backend: ROLL's strategy name -> roll's (`upstream.STRATEGIES`), its options passed through
    to a backend that reads the same ones (vllm, deepspeed_train) or reported."""
    role = keys[0]
    m.done.add(keys)
    name = m.roll_or("", role, "strategy_args", "strategy_name")
    target, why = STRATEGIES[role].get(name, (None, ""))
    if target is None:
        m.claim_all(keys)
        m.unsupported(
            keys,
            f"strategy {name!r}: roll's {role} runs on {sorted({t for t, _ in STRATEGIES[role].values()})}",
        )
        return
    config: dict[str, Any] = {}
    if target == "deepspeed_train" and name != "deepspeed_train":
        flat = _strategy_config(m, role)
        stage = 3 if name.startswith("fsdp2") else 1 if flat.get("use_distributed_optimizer") else 0
        config = {"zero_optimization": {"stage": stage}}
        why = f"{why}, ZeRO-{stage}; {dp_size(m, role)} data-parallel rank(s)"
    name_keys = (*keys, "strategy_name")
    if m.present(*name_keys):
        m.translate(name_keys, f"{role}.strategy_args.strategy_name", name, target, why)
    if config:
        m.set(f"{role}.strategy_args.strategy_config", config)
    _strategy_options(m, (*keys, "strategy_config"), name, target)
    for child in m.file.keys_at(keys):
        if (*keys, child) not in m.done:
            m.claim_all((*keys, child))
            m.drop((*keys, child), "not read by roll's backends")


def _strategy_options(m: Migration, keys: Keys, name: str, target: str) -> None:
    if not m.present(*keys):
        return
    children = m.file.keys_at(keys)
    m.done.add(keys)
    if not children:
        m.drop(keys, "null / empty: the backend's defaults")
        return
    passes = target in ("vllm", "deepspeed_train") and name == target
    for child in children:
        path = (*keys, child)
        if passes:
            value = m.value_or_refuse(path)
            if value is not MISSING:
                m.translate(path, f"{keys[0]}.strategy_args.strategy_config.{child}", value, value)
            continue
        found = match_rule(("strategy_config", name, child))
        if found is None:
            m.claim_all(path)
            m.drop(
                path,
                f"an option of ROLL's {name} backend; roll's {target} has no equivalent ({SPEED_REASON})",
            )
        else:
            m.claim_all(path)
            m.apply(path, *found)


def accumulation(m: Migration, keys: Keys, _: list[str]) -> None:
    """gradient_accumulation_steps x ROLL's data-parallel size: roll's mini-batch spans all ranks."""
    role = keys[0]
    value = m.value_or_refuse(keys)
    if value is MISSING:
        return
    dp = dp_size(m, role)
    why = (
        f"ROLL's mini-batch is per_device_train_batch_size x gradient_accumulation_steps x its {dp} data-parallel"
        " ranks; roll's is per_device_train_batch_size x gradient_accumulation_steps over all ranks"
        if dp > 1
        else ""
    )
    m.translate(keys, f"{role}.training_args.gradient_accumulation_steps", value, value * dp, why)


def train_batching(m: Migration, keys: Keys, _: list[str]) -> None:
    """Micro-batching of a trained role (roll's roles that are never trained refuse these keys)."""
    role, field = keys
    if role not in TRAINED:
        m.drop(keys, "the role is never trained in roll (it samples or scores tokens)")
        return
    value = m.value_or_refuse(keys)
    if value is MISSING:
        return
    if field == "max_tokens_per_microbatch_in_train" and (not value or value < 16):
        m.translate(keys, f"{role}.{field}", value, MISSING, "unset: roll's default budget")
        return
    m.translate(keys, f"{role}.{field}", value, value)


def other_generating(m: Migration, keys: Keys, _: list[str]) -> None:
    """generating_args of a worker that samples nothing (actor_train, reference, critic)."""
    m.claim_all(keys)
    m.drop(keys, "only actor_infer samples")


def finish(m: Migration) -> None:
    """ROLL's default gradient_accumulation_steps (1 per rank) where the file leaves it out; each tag's turn
    budget at most the sampler's (ROLL takes the smaller of the two, roll refuses a larger one)."""
    _turn_budgets(m)
    for role in m.active_roles("<trained>"):
        if not m.present(role, "training_args", "gradient_accumulation_steps"):
            dp = dp_size(m, role)
            m.default(
                f"{role}.training_args.gradient_accumulation_steps",
                dp,
                f"ROLL's default 1 per data-parallel rank, {dp} rank(s)",
            )


def _turn_budgets(m: Migration) -> None:
    from roll_pipeline.migrate.report import Change

    budget_key = "actor_infer.generating_args.max_new_tokens"
    budget = m.output(budget_key)
    if budget is MISSING:
        budget = m.roll_default(budget_key)
    for tag in m.out.get("custom_envs", {}):
        key = f"custom_envs.{tag}.max_tokens_per_step"
        turn = m.output(key)
        if turn is not MISSING and turn > budget:
            m.set(key, budget)
            m.report.converted.append(
                Change(key, key, turn, budget, f"ROLL caps a turn at min(max_tokens_per_step, {budget_key})")
            )


def _first_only(m: Migration, keys: Keys, _: list[str]) -> None:
    raise RuntimeError(f"{'.'.join(keys)} should have been handled before the walk")


FIRST: tuple[Callable[[Migration], None], ...] = (
    algo.estimator,
    algo.kl,
    algo.clip,
    algo.recompute,
    sequence_length,
    generating,
)
"""Handlers that run before the walk, in this order."""

HANDLERS: dict[str, Callable[[Migration, Keys, list[str]], None]] = {
    "estimator": _first_only,
    "kl": _first_only,
    "clip": _first_only,
    "recompute": _first_only,
    "sequence_length": _first_only,
    "generating_args": other_generating,
    "tracker_kwargs": tracker_kwargs,
    "reward_pretrain": reward_pretrain,
    "role_section": role_section,
    "strategy": strategy,
    "accumulation": accumulation,
    "train_batching": train_batching,
    "custom_envs": custom_envs,
}
"""Per-key handlers named by `rules.RULES`."""
