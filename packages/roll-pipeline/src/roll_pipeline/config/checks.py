"""Cross-field checks of `AgenticConfig`: no setting may be accepted and then do nothing.

A value that the run would silently ignore (a role's optimiser settings on a role that is never
trained, critic settings without a critic, an adaptive-KL horizon without a target) is reported as a
problem with the fix. `AgenticConfig`'s validator raises them all at once; `roll config` / `roll train`
print them one per line. Backend names are checked against the installed extras in
`roll_pipeline.config.strategies.strategy_problems`. What depends on the advantage estimator is read from
its registered declaration (`roll_algos.EstimatorSpec`: needs_critic, options), never from its name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roll_algos import (
    AlgosError,
    estimator_spec,
    gspo_clip_problem,
    policy_loss_spec,
    registered_estimators,
    registered_policy_losses,
    skipped_tokens_problem,
)
from roll_rollout.hosting.env_kinds import env_kind

from roll_pipeline.config.colocation import SLEEP_LEVELS, infer_sleep, sleep_level_of
from roll_pipeline.config.roles import GeneratingArgs, TrainingArgs
from roll_pipeline.config.tiny_recipe import TINY_RECIPE

if TYPE_CHECKING:
    from roll_pipeline.config.roles import WorkerConfig
    from roll_pipeline.config.schema import AgenticConfig

__all__ = [
    "CRITIC_FIELDS",
    "ESTIMATOR_OPTION_FIELDS",
    "POLICY_LOSS_OPTION_FIELDS",
    "config_problems",
    "estimator_problem",
    "policy_loss_problem",
]

TRAIN_BATCHING_FIELDS = (
    "use_dynamic_batching_in_train",
    "use_sequence_packing",
    "max_tokens_per_microbatch_in_train",
    "sequence_length_round_in_train",
    "world_size",
)
"""WorkerConfig fields that only a trained role (actor_train, critic) reads."""

DATA_PARALLEL_STRATEGIES = ("hf_train", "deepspeed_train", "hf_critic")
"""The train strategies that run as N data-parallel ranks (`roll_strategies.DataParallelSpec`)."""


def _roles(cfg: AgenticConfig) -> dict[str, WorkerConfig]:
    return {name: getattr(cfg, name) for name in ("actor_train", "actor_infer", "reference", "critic")}


def _default(cfg: AgenticConfig, name: str) -> object:
    """The default of a top-level field (without building a whole AgenticConfig, whose validator runs this)."""
    return type(cfg).model_fields[name].get_default(call_default_factory=True)


def _is_set(cfg: AgenticConfig, name: str) -> bool:
    """Whether a top-level field differs from both bases a config starts from: the schema default and the
    tiny recipe (`roll_tiny`), so a field one base sets is not taken for the user's."""
    value = getattr(cfg, name)
    return value != _default(cfg, name) and (name not in TINY_RECIPE or value != TINY_RECIPE[name])


def _role_problems(cfg: AgenticConfig) -> list[str]:
    """Settings of a role that the role never reads."""
    problems = []
    for name, role in _roles(cfg).items():
        default = _default(cfg, name)
        unused = []
        if name != "actor_infer" and role.generating_args != GeneratingArgs():
            unused.append(("generating_args", "it samples nothing"))
        if name in ("actor_infer", "reference"):
            if role.training_args != TrainingArgs():
                unused.append(("training_args", "it is never trained"))
            unused += [
                (f, "it is never trained")
                for f in TRAIN_BATCHING_FIELDS
                if getattr(role, f) != getattr(default, f)
            ]
        problems += [
            f"{name}.{field} is set, but {why}, so it would do nothing; remove it" for field, why in unused
        ]
    return problems


REFERENCE_PLACEMENT_FIELDS = (
    "strategy_args",
    "device_mapping",
    "num_gpus_per_worker",
    "num_threads",
    "infer_batch_size",
)
"""The reference role's fields that place and batch a worker of its own (its `model_args` are always read)."""


def _exact_kl_reference_problems(cfg: AgenticConfig) -> list[str]:
    """With an exact KL the reference is a frozen copy inside actor_train: its own placement is never read."""
    if not cfg.reference_in_trainer:
        return []
    default, recipe = _default(cfg, "reference"), TINY_RECIPE.get("reference", {})
    unread = [
        name
        for name in REFERENCE_PLACEMENT_FIELDS
        if getattr(cfg.reference, name) != getattr(default, name)
        and getattr(cfg.reference, name) != recipe.get(name)
    ]
    return [
        f"reference.{name} is set, but with kl_penalty={cfg.kl_penalty} the reference is a frozen copy inside"
        " actor_train (its devices, its batch size), so it would do nothing; use kl_penalty=k3 for a reference"
        " worker of its own, or remove it"
        for name in unread
    ]


def _rank_problems(cfg: AgenticConfig) -> list[str]:
    """Data-parallel ranks a trained role cannot run: a rank count other than its GPUs', a backend without
    ranks, a GPU asked for twice, or a mini-batch with fewer rows than ranks."""
    problems = []
    roles = {"actor_train": cfg.actor_train, **({"critic": cfg.critic} if cfg.uses_critic else {})}
    for name, role in roles.items():
        gpus, ranks = role.device_mapping, role.data_parallel_size
        if gpus and role.world_size is not None and role.world_size != len(gpus):
            problems.append(
                f"{name}.world_size={role.world_size} with device_mapping={gpus}: on GPUs a trained role runs one"
                f" rank per device_mapping GPU ({len(gpus)} here); drop world_size, or list {role.world_size}"
                " GPUs in device_mapping"
            )
            continue
        if ranks == 1:
            continue
        strategy = role.strategy_args.strategy_name
        if strategy not in DATA_PARALLEL_STRATEGIES:
            problems.append(
                f"{name} runs {ranks} data-parallel ranks, but strategy_name={strategy!r} has none; use one of"
                f" {', '.join(DATA_PARALLEL_STRATEGIES)}, or one rank (world_size: null, one device_mapping GPU)"
            )
        if len(set(gpus)) < len(gpus):
            problems.append(
                f"{name}.device_mapping={gpus} lists a GPU twice: each rank trains on a GPU of its own; list"
                " distinct GPUs"
            )
        if role.num_gpus_per_worker is not None and role.num_gpus_per_worker > 1:
            problems.append(
                f"{name}.num_gpus_per_worker={role.num_gpus_per_worker:g} asks each of its {ranks} ranks for more"
                " than one GPU, but a rank trains on one; set it <= 1, or null"
            )
        targs = role.training_args
        rows = targs.per_device_train_batch_size * targs.gradient_accumulation_steps
        if rows < ranks:
            problems.append(
                f"{name} runs {ranks} data-parallel ranks, but a mini-batch is per_device_train_batch_size x"
                f" gradient_accumulation_steps = {targs.per_device_train_batch_size} x"
                f" {targs.gradient_accumulation_steps} = {rows} rows, fewer than one per rank; raise"
                f" {name}.training_args.gradient_accumulation_steps (or per_device_train_batch_size) so the"
                f" product is >= {ranks}, or run fewer ranks"
            )
    return problems


def _gpu_problems(cfg: AgenticConfig) -> list[str]:
    """GPU requests Ray's GPU pool cannot place (one whole-GPU bundle per device_mapping index; a worker asks for
    a share of each of its GPUs): a worker asking for more GPUs than it is mapped to, or colocated workers
    asking for more than a whole GPU together. The cluster's own GPU count is checked when the pool is made."""
    if cfg.cluster.backend != "ray":
        return []
    roles = {n: getattr(cfg, n) for n in cfg.spawned_roles}
    sharing: dict[int, int] = {}
    for role in (cfg.actor_train, cfg.actor_infer, cfg.reference, *([cfg.critic] if cfg.uses_critic else [])):
        for gpu in set(role.device_mapping):
            sharing[gpu] = sharing.get(gpu, 0) + 1
    problems, shares = [], {}  # shares: GPU -> {role: its share of that GPU}
    for name, role in roles.items():
        gpus = list(dict.fromkeys(role.device_mapping))
        if not gpus:
            continue
        ranked = name in ("actor_train", "critic") and role.data_parallel_size > 1
        each, wanted = 1 if ranked else len(gpus), role.num_gpus_per_worker
        if wanted is not None and wanted > each:
            if not ranked:  # a rank asking for more than one GPU is a `_rank_problems` problem
                problems.append(
                    f"{name}.num_gpus_per_worker={wanted:g} asks for more GPUs than its"
                    f" device_mapping={role.device_mapping} gives its worker ({each}); set it <= {each}, or null,"
                    " or list more GPUs in device_mapping"
                )
            continue
        share = wanted / each if wanted is not None else 1 / max(sharing[g] for g in gpus)
        for gpu in gpus:
            shares.setdefault(gpu, {})[name] = share
    for gpu, by_role in sorted(shares.items()):
        if sum(by_role.values()) > 1 + 1e-9:
            asks = ", ".join(f"{n} {s:g}" for n, s in by_role.items())
            problems.append(
                f"GPU {gpu} is asked for more than one GPU in all by the roles mapped to it ({asks}); lower their"
                " num_gpus_per_worker so the shares add up to at most 1, or null (colocated roles then share it"
                " equally), or map a role onto other GPUs"
            )
    return problems


CRITIC_FIELDS = ("critic", "critic_warmup", "value_clip")
"""Top-level fields that only an estimator declaring `needs_critic` reads."""

ESTIMATOR_OPTION_FIELDS = (
    "lambd",
    "gigpo_step_weight",
    "gigpo_norm_mode",
    "gigpo_anchor_threshold",
    "gigpo_anchor_similarity",
)
"""Top-level fields passed to the estimator as the `AdvantageConfig` field of the same name; only an estimator
declaring it in its `options` reads it."""


def estimator_problem(name: str) -> str | None:
    """Why `name` is no usable `adv_estimator` (None when it is registered): the registered names and how to
    register one."""
    try:
        estimator_spec(name)
    except AlgosError as exc:
        return str(exc)
    return None


POLICY_LOSS_OPTION_FIELDS = {"dual_clip_loss": "dual_clip", "ratio_level": "ratio_level"}
"""Top-level field -> the `roll_algos.PolicyLossConfig` option it sets; only a policy loss declaring that option
reads it."""


def policy_loss_problem(name: str) -> str | None:
    """Why `name` is no usable `policy_loss` (None when it is registered): the registered names and how to
    register one."""
    try:
        policy_loss_spec(name)
    except AlgosError as exc:
        return str(exc)
    return None


def _policy_loss_option_problems(cfg: AgenticConfig) -> list[str]:
    """Loss settings the configured `policy_loss` does not declare among its options (it would ignore them)."""
    spec = policy_loss_spec(cfg.policy_loss)
    options = POLICY_LOSS_OPTION_FIELDS
    unread = [f for f, option in options.items() if option not in spec.options and _is_set(cfg, f)]
    if not unread:
        return []
    wanted = {options[f] for f in unread}
    readers = [n for n in registered_policy_losses() if wanted <= set(policy_loss_spec(n).options)]
    return [
        f"{', '.join(unread)} set, but policy_loss={cfg.policy_loss!r} does not read it (docs/algos/policy_loss.md);"
        f" drop {', '.join(unread)}, or set policy_loss to one that reads it: {'/'.join(readers)}"
    ]


def _readers(wanted: str) -> str:
    """`adv_estimator=a/b` for the registered estimators that declare `wanted` ('critic' or an option)."""
    names = [
        n
        for n in registered_estimators()
        if (estimator_spec(n).needs_critic if wanted == "critic" else wanted in estimator_spec(n).options)
    ]
    return f"adv_estimator={'/'.join(names)}" if names else "no registered adv_estimator"


def _estimator_problems(cfg: AgenticConfig) -> list[str]:
    problems = []
    spec = estimator_spec(cfg.adv_estimator)
    unused = [] if spec.needs_critic else [name for name in CRITIC_FIELDS if _is_set(cfg, name)]
    if unused:
        readers = _readers("critic")
        problems.append(
            f"{', '.join(unused)} set, but only {readers} uses a critic (got {cfg.adv_estimator!r}); set"
            f" {readers} or remove them"
        )
    for name in ESTIMATOR_OPTION_FIELDS:
        if name not in spec.options and _is_set(cfg, name):
            readers = _readers(name)
            problems.append(
                f"{name} set, but only {readers} reads it (got {cfg.adv_estimator!r}); set {readers} or"
                f" remove {name}"
            )
    exact = cfg.gigpo_anchor_threshold >= 1.0
    if "gigpo_anchor_similarity" in spec.options and exact and _is_set(cfg, "gigpo_anchor_similarity"):
        problems.append(
            "gigpo_anchor_similarity set with gigpo_anchor_threshold=1 (exact anchors): no similarity is"
            " computed; set gigpo_anchor_threshold < 1 (e.g. 0.9) or drop gigpo_anchor_similarity"
        )
    if cfg.sample_shape == "trajectory":  # an agent's history is its own: its calls chain or train as steps
        cut = [
            t
            for t in cfg.train_env_manager.tags
            if cfg.custom_envs[t].max_history_turns is not None
            and not env_kind(cfg.custom_envs[t].env_type).agent_plays
        ]
        if cut:
            problems.append(
                f"sample_shape=trajectory trains each episode as one conversation, but custom_envs {cut} cut the"
                " history from prompts (max_history_turns is not null), so no single sequence holds what the"
                " policy saw at every turn; set their max_history_turns: null, or sample_shape=step"
            )
    return problems


def _loss_problems(cfg: AgenticConfig) -> list[str]:
    problems = []
    if cfg.target_kl is None and _is_set(cfg, "kl_horizon"):
        problems.append(
            "kl_horizon set without target_kl: it only shapes the adaptive controller; set target_kl"
        )
    if cfg.target_kl is not None and not cfg.uses_reference:
        problems.append(
            "target_kl set, but no KL term is on for the controller to scale; set init_kl_coef > 0 (reward"
            " penalty) or use_kl_loss=true with kl_loss_coef > 0"
        )
    if not cfg.use_kl_loss and _is_set(cfg, "kl_loss_coef"):
        problems.append("kl_loss_coef set with use_kl_loss=false: set use_kl_loss=true or drop kl_loss_coef")
    if cfg.skip_confident_by == "reference" and not (cfg.use_kl_loss and cfg.skip_confident_tokens):
        problems.append(
            "skip_confident_by=reference compares the reference model's probabilities, which the update sees"
            " only with use_kl_loss=true, and only matters with skip_confident_tokens set; set both, or drop it"
        )
    scoped = cfg.entropy_scope == "turn_max" or cfg.skip_confident_tokens
    if cfg.entropy_scope != "response" and not (scoped and cfg.entropy_loss_coef > 0):
        problems.append(
            f"entropy_scope={cfg.entropy_scope} scopes an entropy bonus (decision: to the tokens skip_confident_tokens"
            " keeps); set entropy_loss_coef > 0 (and skip_confident_tokens for decision), or drop entropy_scope"
        )
    sampling = cfg.actor_infer.generating_args
    if sampling.reshapes_sampling() and not cfg.recompute_old_log_probs:
        problems.append(
            "actor_infer samples with temperature (or temperature_schedule)/top_p/top_k, so its log-probs are of the reshaped distribution"
            " while the trainer's are of the model's own: with recompute_old_log_probs=false the PPO ratio would"
            " compare the two; set recompute_old_log_probs=true (tis_cap then reweights to the model's"
            " distribution), or sample with temperature 1, top_p 1, top_k 0"
        )
    if cfg.tis_cap is not None and not cfg.recompute_old_log_probs:
        problems.append(
            "tis_cap needs recompute_old_log_probs=true: without recomputation the old log-probs are the"
            " inference ones and every importance weight is 1; set both, or drop tis_cap"
        )
    if cfg.pg_clip_low is not None and cfg.pg_clip_high is not None and _is_set(cfg, "pg_clip"):
        problems.append("pg_clip set while pg_clip_low and pg_clip_high override it on both sides; drop one")
    skipped = skipped_tokens_problem(cfg.policy_loss, cfg.ratio_level, cfg.skip_confident_tokens)
    clip = gspo_clip_problem(*cfg.clip_range)
    problems += [skipped] if skipped else []
    problems += [clip] if clip and cfg.policy_loss == "gspo" else []
    return problems


def _vllm_problems(cfg: AgenticConfig) -> list[str]:
    """A vllm actor_infer: the trainer must recompute the old log-probs, and its sleep (when colocated,
    `config.colocation`) must fit the rollout mode and the weight-sync frequency."""
    infer = cfg.actor_infer
    if infer.strategy_args.strategy_name != "vllm":
        return []
    problems = []
    if not cfg.recompute_old_log_probs:
        problems.append(
            "actor_infer.strategy_args.strategy_name=vllm samples with vLLM's own kernels (other numerics than"
            " the trainer's; bf16 on a GPU), so its log-probs are not the trainer's and the PPO ratio must"
            " start from the trainer's own: set recompute_old_log_probs=true (tis_cap can then reweight by"
            " vLLM's log-probs)"
        )
    seqs = infer.strategy_args.strategy_config.get("max_num_seqs")
    # a batch size either base sets is not the user's: the engine then takes the config's max_num_seqs
    field = type(infer).model_fields["infer_batch_size"]
    bases = (field.default, TINY_RECIPE["actor_infer"].get("infer_batch_size"))
    if seqs is not None and seqs != infer.infer_batch_size and infer.infer_batch_size not in bases:
        problems.append(
            f"actor_infer.infer_batch_size={infer.infer_batch_size} and actor_infer.strategy_args.strategy_config"
            f".max_num_seqs={seqs} disagree: with vllm infer_batch_size becomes vLLM's max_num_seqs (the most"
            " requests the engine runs at once); drop one of the two, or set them equal"
        )
    level = sleep_level_of(infer)
    if not isinstance(level, int) or isinstance(level, bool) or level not in SLEEP_LEVELS:
        problems.append(
            f"actor_infer.strategy_args.strategy_config.sleep_level={level!r}: expected one of {SLEEP_LEVELS}"
            " (0: never sleep, 1: offload the weights to the CPU while training runs, 2: drop them)"
        )
        return problems
    sleep = infer_sleep(_roles(cfg), cfg.spawned_roles)
    if sleep.enabled and cfg.async_generation_ratio > 0:
        problems.append(
            f"actor_infer (vllm, sleep_level={sleep.level}) shares GPUs with {list(sleep.shared_with)}, so its"
            " engine sleeps while they run and the rollout cannot overlap training, but"
            f" async_generation_ratio={cfg.async_generation_ratio}; set async_generation_ratio=0, or"
            " sleep_level: 0 in actor_infer.strategy_args.strategy_config (lower gpu_memory_utilization so both"
            " fit), or give actor_infer GPUs of its own (device_mapping)"
        )
    if sleep.enabled and sleep.level == 2 and cfg.model_update_frequency > 1:
        problems.append(
            f"actor_infer sleeps at sleep_level=2, which drops its weights every step, but"
            f" model_update_frequency={cfg.model_update_frequency} would keep serving the dropped ones between"
            " syncs; set model_update_frequency=1, or sleep_level: 1 (weights kept on the CPU)"
        )
    return problems


def _honoured_settings_problems(cfg: AgenticConfig) -> list[str]:
    """Settings that would be accepted and not honoured: W&B's arguments with W&B off, and a tag's token budget
    above the sampler's (a turn stops at the smaller of the two)."""
    problems = []
    if cfg.tracker_kwargs and "wandb" not in cfg.track_with:
        problems.append(
            f"tracker_kwargs {sorted(cfg.tracker_kwargs)} only reach W&B (wandb.init), which track_with"
            f" {cfg.track_with} leaves off; TensorBoard and metrics.jsonl are always written in the run folder."
            " Add wandb to track_with, or drop tracker_kwargs"
        )
    budget = cfg.actor_infer.generating_args.max_new_tokens
    for tag, env in cfg.custom_envs.items():
        default_turn = type(env).model_fields["max_tokens_per_step"].default
        if env.max_tokens_per_step > budget and env.max_tokens_per_step != default_turn:
            problems.append(
                f"custom_envs.{tag}.max_tokens_per_step={env.max_tokens_per_step} is above"
                f" actor_infer.generating_args.max_new_tokens={budget}, which caps every turn; raise"
                f" max_new_tokens to {env.max_tokens_per_step}, or lower max_tokens_per_step to {budget}"
            )
    return problems


def config_problems(cfg: AgenticConfig) -> list[str]:
    """Every cross-field problem of a config (empty when it is consistent)."""
    problems = []
    if cfg.render_save_dir is None and _is_set(cfg, "render_episodes_per_tag"):
        problems.append(
            "render_episodes_per_tag set with render_save_dir=null: nothing is rendered; set render_save_dir"
            " (e.g. render_save_dir=renders) or drop render_episodes_per_tag"
        )
    return (
        problems
        + _honoured_settings_problems(cfg)
        + _role_problems(cfg)
        + _exact_kl_reference_problems(cfg)
        + _rank_problems(cfg)
        + _gpu_problems(cfg)
        + _estimator_problems(cfg)
        + _loss_problems(cfg)
        + _policy_loss_option_problems(cfg)
        + _vllm_problems(cfg)
    )
