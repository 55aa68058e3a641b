"""The role checks of `AgenticConfig` (`config.checks` runs them with the others): a role's setting it never reads,
a reference placed on its own while an exact KL holds it inside actor_train, data-parallel ranks a role cannot run,
GPU shares Ray's pool cannot place, and a vllm actor_infer's recomputation and sleep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roll_strategies.infer.sleep import SLEEP_LEVELS

from roll_pipeline.config.colocation import infer_sleep, sleep_level_of
from roll_pipeline.config.roles import GeneratingArgs, TrainingArgs
from roll_pipeline.config.tiny_recipe import TINY_RECIPE, field_default

if TYPE_CHECKING:
    from roll_pipeline.config.roles import WorkerConfig
    from roll_pipeline.config.schema import AgenticConfig

__all__ = ["exact_kl_reference_problems", "gpu_problems", "rank_problems", "role_problems", "vllm_problems"]

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


def role_problems(cfg: AgenticConfig) -> list[str]:
    """Settings of a role that the role never reads."""
    problems = []
    for name, role in _roles(cfg).items():
        default = field_default(cfg, name)
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


def exact_kl_reference_problems(cfg: AgenticConfig) -> list[str]:
    """With an exact KL the reference is a frozen copy inside actor_train: its own placement is never read."""
    if not cfg.reference_in_trainer:
        return []
    default, recipe = field_default(cfg, "reference"), TINY_RECIPE.get("reference", {})
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


def rank_problems(cfg: AgenticConfig) -> list[str]:
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


def gpu_problems(cfg: AgenticConfig) -> list[str]:
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
            if not ranked:  # a rank asking for more than one GPU is a `rank_problems` problem
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


def vllm_problems(cfg: AgenticConfig) -> list[str]:
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
