"""The ROLL -> roll translation table, as data: one `Rule` per ROLL key path (ROLL's agentic configs at
alibaba/ROLL commit 8eb27cc), ROLL's defaults where they differ from roll's. What ROLL itself has (its fields, backends and env types) is
`roll_keys.upstream`.

A rule's `pattern` is a dotted ROLL key path where `*` stands for any one key and `<role>` for one of the
worker sections (actor_train, actor_infer, reference, critic); what they matched fills `{0}`, `{1}`, ... of
the rule's `target`. The first matching rule wins, so specific rules come before general ones. Kinds:

- `rename`: the same setting in roll under `target`, its value through the named converter
  (`migrate.convert`); `roll_default` is ROLL's default, set explicitly when the file leaves the key out and
  roll's default differs;
- `drop`: no effect on what roll trains (logging, placement, speed, memory), or ignored by ROLL itself;
- `approximate`: roll does the same thing its own way; the results can differ in detail (reported);
- `unsupported`: changes what is trained and roll cannot do it: an error unless `--drop-unsupported`;
  a value in `neutral` is ROLL's no-op and is dropped instead;
- `handler`: a function of `migrate.handlers` (settings that span several keys).

Nothing of roll's is imported here, so `config.compose` can name roll's key for a ROLL one from this table
(`roll_keys.hints`).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Literal, NamedTuple

__all__ = [
    "NO_DEFAULT",
    "ROLES",
    "RULES",
    "TRAINED",
    "Rule",
    "match_rule",
]

ROLES = ("actor_train", "actor_infer", "reference", "critic")
"""Worker sections of both configs (`<role>` in a pattern)."""

TRAINED = ("actor_train", "critic")
"""The trained worker sections (`<trained>` in a pattern)."""

NO_DEFAULT: Any = object()
"""`Rule.roll_default` of a rule whose ROLL default is not set explicitly."""

Kind = Literal["rename", "drop", "approximate", "unsupported", "handler"]


class Rule(NamedTuple):
    """One ROLL key (pattern) and what becomes of it in roll."""

    pattern: str
    kind: Kind
    target: str = ""
    """rename: the roll key ({0}... filled from the pattern's wildcards); handler: the handler's name."""
    reason: str = ""
    """drop / approximate / unsupported: why; rename: a note on the conversion (optional)."""
    convert: str = ""
    """rename: the converter's name in `migrate.convert` (empty: the value as is)."""
    neutral: tuple[Any, ...] = ()
    """unsupported: values that do nothing in ROLL (dropped instead of refused)."""
    roll_default: Any = NO_DEFAULT
    """rename: ROLL's default, written explicitly when the file leaves the key out and roll's differs."""


_LOGS = "roll writes logs, TensorBoard events and metrics.jsonl in the run folder (output_dir/exp_name)"
_PLACE = "placement and scheduling only; roll places roles by device_mapping on Ray (or in-process)"
SPEED_REASON = "speed or memory only, no effect on what is trained"
_PARALLEL = (
    "roll trains data-parallel only (DeepSpeed ZeRO): each rank holds the whole model; same results, more"
    " memory per GPU"
)
_TEMPLATE = (
    "roll formats prompts with the model tokenizer's own chat template (ROLL's template for the same model"
    " family)"
)
PROMPT_REASON = (
    "roll builds each prompt from the env's own instruction (system prompt; set custom_envs.TAG.env_instruction"
    " to replace it) and the observation, not from ROLL's agent templates: same game, other prompt text"
)
IGNORED_REASON = (
    "not a field of ROLL's config: ROLL ignores it too (at most an interpolation source, whose values reach roll"
    " through the keys using it)"
)

# fmt: off
RULES: tuple[Rule, ...] = (
    # --- run, logging, checkpoints ---
    Rule("hydra", "drop", reason="Hydra's own settings (run dir, output subdir); roll's runs go to output_dir/exp_name"),
    Rule("exp_name", "rename", "exp_name"),
    Rule("seed", "rename", "seed"),
    Rule("output_dir", "rename", "output_dir", roll_default="./output"),
    Rule("logging_dir", "drop", reason=_LOGS),
    Rule("base_dir", "drop", reason=_LOGS),
    Rule("track_with", "rename", "track_with", convert="track_with", roll_default="tensorboard"),
    Rule("tracker_kwargs", "handler", "tracker_kwargs"),
    Rule("checkpoint_config", "drop", reason="roll saves checkpoint-N folders in the run folder (every save_steps)"),
    Rule("max_ckpt_to_keep", "rename", "keep_last_n", convert="keep_last_n"),
    Rule("resume_from_checkpoint", "rename", "resume_from_checkpoint", convert="resume"),
    Rule("max_steps", "rename", "max_steps", convert="max_steps", roll_default=500),
    Rule("save_steps", "rename", "save_steps", roll_default=50),
    Rule("logging_steps", "rename", "logging_steps"),
    Rule("eval_steps", "rename", "eval_steps", convert="eval_steps", roll_default=10),
    Rule("render_save_dir", "rename", "render_save_dir", convert="render_save_dir"),
    Rule("system_envs", "drop", reason="environment variables of ROLL's workers; export what your run needs in the shell"),
    Rule("rpc_timeout", "drop", reason=_PLACE),
    Rule("num_gpus_per_node", "drop", reason=_PLACE),
    Rule("num_nodes", "drop", reason=_PLACE),
    Rule("model_download_type", "drop", reason="roll loads hub ids from the Hugging Face cache (HF_HUB_OFFLINE=1 offline)"),
    Rule("profiler_*", "drop", reason=SPEED_REASON),
    Rule("length_profiler_dir", "drop", reason=SPEED_REASON),
    Rule("otlp_output_dir", "drop", reason=_LOGS),
    Rule("report_length_and_rewards", "drop", reason=_LOGS),
    Rule("rollout_dump_dir", "drop", reason="dump episodes with `roll rollout --dump DIR` instead"),
    Rule("rollout_mock", "drop", reason="ROLL's rollout dump/mock for debugging; `roll rollout --dump DIR` dumps episodes"),
    Rule("env_monitor", "drop", reason="roll fails a hung env call after env_step_timeout_s and recreates the env"),
    Rule("is_offload_states", "drop", reason=SPEED_REASON),
    Rule("is_offload_optimizer_states_in_train_step", "drop", reason=SPEED_REASON),
    Rule("model_update_buffer_size_mb", "drop", reason=SPEED_REASON),
    Rule("max_running_requests", "drop", reason=SPEED_REASON),
    Rule("generate_opt_level", "drop", reason=SPEED_REASON),
    Rule("router_args", "drop", reason=_PLACE),
    Rule("partial_gpu_mode", "drop", reason=_PLACE),
    Rule("transfer_backend", "drop", reason=SPEED_REASON),
    Rule("skip_mock_system_prompt", "drop", reason=_TEMPLATE),
    Rule("parse_tool_call_parameter_to_dict", "drop", reason="tool-call parsing of ROLL's tool envs, which roll does not have"),
    Rule("exp_mode", "unsupported", reason="ROLL's ground-truth / unit-test evaluation modes", neutral=("train",)),
    # --- batch sizes and lengths ---
    Rule("rollout_batch_size", "rename", "rollout_batch_size", roll_default=128),
    Rule("val_batch_size", "rename", "val_batch_size", convert="val_batch_size", roll_default=128),
    Rule("sequence_length", "handler", "sequence_length"),
    Rule("prompt_length", "handler", "sequence_length"),
    Rule("response_length", "handler", "sequence_length"),
    Rule("val_prompt_length", "handler", "sequence_length"),
    Rule("val_sequence_length", "handler", "sequence_length"),
    Rule("batch_adjust_mode", "drop", reason="ROLL copies or deletes rows to fit its mini-batches; roll's micro-batches take any number of rows"),
    Rule("async_generation_ratio", "rename", "async_generation_ratio", convert="async_ratio", roll_default=0),
    # --- algorithm (handlers read these together) ---
    Rule("adv_estimator", "handler", "estimator"),
    Rule("gamma", "handler", "estimator"),
    Rule("lambd", "handler", "estimator"),
    Rule("step_reward_gamma", "handler", "estimator"),
    Rule("episode_reward_weight", "handler", "estimator"),
    Rule("step_reward_weight", "handler", "estimator"),
    Rule("reward_normalization", "handler", "estimator"),
    Rule("norm_mean_type", "handler", "estimator"),
    Rule("norm_std_type", "handler", "estimator"),
    Rule("use_kl_loss", "handler", "kl"),
    Rule("kl_loss_coef", "handler", "kl"),
    Rule("init_kl_coef", "handler", "kl"),
    Rule("add_token_level_kl", "handler", "kl"),
    Rule("kl_penalty", "handler", "kl"),
    Rule("target_kl", "handler", "kl"),
    Rule("kl_horizon", "handler", "kl"),
    Rule("enable_reference", "drop", reason="derived: roll loads the reference model when a KL term is on"),
    Rule("pg_clip", "handler", "clip"),
    Rule("use_pg_clip_range", "handler", "clip"),
    Rule("pg_clip_low", "handler", "clip"),
    Rule("pg_clip_high", "handler", "clip"),
    Rule("enable_old_logprobs_recompute", "handler", "recompute"),
    Rule("force_disable_old_logprobs_recompute", "handler", "recompute"),
    Rule("train_infer_correction", "handler", "recompute"),
    Rule("dual_clip_loss", "unsupported", reason="ROLL's dual clip uses c = 1 + 2*pg_clip; roll's dual_clip_loss uses c = 3", neutral=(False,)),
    Rule("ratio_type", "rename", "ratio_level"),
    Rule("ppo_epochs", "rename", "ppo_epochs"),
    Rule("max_grad_norm", "rename", "actor_train.training_args.max_grad_norm"),
    Rule("whiten_advantages", "rename", "whiten_advantages", roll_default=False),
    Rule("whiten_rewards", "unsupported", reason="roll normalises scores per group (norm_mean_type), not token rewards over the batch", neutral=(False,)),
    Rule("advantage_clip", "rename", "advantage_clip"),
    Rule("reward_clip", "rename", "reward_clip"),
    Rule("entropy_loss_coef", "rename", "entropy_loss_coef"),
    Rule("loss_agg_mode", "rename", "loss_agg_mode"),
    Rule("critic_warmup", "rename", "critic_warmup"),
    Rule("value_clip", "rename", "value_clip"),
    Rule("l2", "unsupported", reason="an L2 penalty on the weights; use actor_train.training_args.weight_decay", neutral=(0, 0.0)),
    Rule("use_reward_scaling", "unsupported", reason="ROLL's running reward scaling", neutral=(False,)),
    Rule("use_reward_norm", "unsupported", reason="ROLL's running reward normalisation", neutral=(False,)),
    Rule("add_len_reward", "unsupported", reason="a length reward", neutral=(False,)),
    Rule("use_token_reward", "unsupported", reason="per-token rewards from the env", neutral=(False,)),
    Rule("dirty_data_mask", "unsupported", reason="ROLL's dirty-data masking", neutral=(False,)),
    Rule("open_feedback_turn", "unsupported", reason="ROLL's feedback turns", neutral=(False,)),
    Rule("is_pure_opd", "unsupported", reason="on-policy distillation from a teacher", neutral=(False,)),
    Rule("use_opd", "unsupported", reason="on-policy distillation from a teacher", neutral=(False,)),
    Rule("teacher", "unsupported", reason="on-policy distillation from a teacher", neutral=(None, {})),
    Rule("student_*", "unsupported", reason="on-policy distillation from a teacher", neutral=(None, {})),
    Rule("pure_opd_pipeline_type", "drop", reason="only read with is_pure_opd"),
    # --- models ---
    Rule("pretrain", "rename", "pretrain"),
    Rule("reward_pretrain", "handler", "reward_pretrain"),
    Rule("reward", "unsupported", reason="an LLM reward / judge worker; roll's rewards come from the env", neutral=(None, {})),
    Rule("critic", "handler", "role_section"),
    Rule("custom_envs", "handler", "custom_envs"),
    Rule("reference", "handler", "role_section"),
    # --- env managers ---
    Rule("<role>.generating_args", "handler", "generating_args"),
    Rule("train_env_manager.generating_args", "handler", "generating_args"),
    Rule("val_env_manager.generating_args", "handler", "generating_args"),
    Rule("*_env_manager.num_env_groups", "rename", "{0}_env_manager.num_env_groups", roll_default=128),
    Rule("*_env_manager.group_size", "rename", "{0}_env_manager.group_size", roll_default=1),
    Rule("*_env_manager.group_size_redundancy", "rename", "{0}_env_manager.group_size_redundancy"),
    Rule("*_env_manager.tags", "rename", "{0}_env_manager.tags", roll_default=["SimpleSokoban"]),
    Rule("*_env_manager.num_groups_partition", "rename", "{0}_env_manager.num_groups_partition"),
    Rule("*_env_manager.max_env_num_per_worker", "rename", "{0}_env_manager.max_env_num_per_worker", convert="envs_per_worker", roll_default=0),
    Rule("*_env_manager.max_traj_per_env", "drop", reason="roll plays as many episodes per env as the batch needs"),
    Rule("*_env_manager.format_penalty", "drop", reason="ROLL reads the format penalty from custom_envs.TAG.env_config only; this one does nothing in ROLL either"),
    Rule("*_env_manager.llm_proxy", "unsupported", reason="a policy other than the trained model (ROLL's random / OpenAI proxies); `roll eval --openai-base-url` plays a served model", neutral=(None, {}, {"proxy_type": "policy"}, {"proxy_type": "policy", "proxy_config": {}})),
    Rule("*_env_manager.group_filter_cls", "unsupported", reason="a custom group filter class", neutral=("roll.pipeline.agentic.agentic_pipeline.GroupFilter",)),
    Rule("*_env_manager.worker_cls", "drop", reason="ROLL's env worker class; roll's env workers are its own"),
    Rule("*_env_manager.*", "drop", reason="worker fields of ROLL's env manager (model, devices, env vars): roll's env workers run no model"),
    # --- sampling: the generating_args ROLL samples with (actor_infer's, else train_env_manager's) ---
    Rule("generating_args.temperature", "rename", "actor_infer.generating_args.temperature", convert="temperature", roll_default=0.95),
    Rule("generating_args.top_p", "rename", "actor_infer.generating_args.top_p", roll_default=0.7),
    Rule("generating_args.top_k", "rename", "actor_infer.generating_args.top_k", convert="top_k", roll_default=50),
    Rule("generating_args.max_new_tokens", "rename", "actor_infer.generating_args.max_new_tokens", roll_default=8192),
    Rule("generating_args.stop_strings", "rename", "actor_infer.generating_args.stop_strings", convert="stop_strings", roll_default=None),
    Rule("generating_args.do_sample", "unsupported", reason="greedy training rollouts (roll samples them; its validation is greedy)", neutral=(True, None)),
    Rule("generating_args.num_beams", "unsupported", reason="beam search", neutral=(1, None)),
    Rule("generating_args.repetition_penalty", "unsupported", reason="a repetition penalty (reshapes the sampling distribution)", neutral=(1.0, None)),
    Rule("generating_args.num_return_sequences", "drop", reason="ROLL sets it to 1 in agentic runs: one response per env turn"),
    Rule("generating_args.max_length", "drop", reason="ROLL's agentic turns read max_new_tokens and sequence_length"),
    Rule("generating_args.length_penalty", "drop", reason="beam search only"),
    Rule("generating_args.include_stop_str_in_output", "drop", reason="roll keeps the stop string in the response, trained as sampled"),
    Rule("generating_args.logprobs", "drop", reason="roll always keeps the sampled tokens' log-probs"),
    # --- backend options, matched as strategy_config.<ROLL backend>.KEY (vllm and deepspeed ones pass through) ---
    Rule("strategy_config.megatron_*.tensor_model_parallel_size", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.pipeline_model_parallel_size", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.virtual_pipeline_model_parallel_size", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.context_parallel_size", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.expert_model_parallel_size", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.sequence_parallel", "drop", reason=_PARALLEL),
    Rule("strategy_config.megatron_*.use_distributed_optimizer", "drop", reason="ZeRO partitions the optimiser state instead (zero_optimization.stage)"),
    Rule("strategy_config.megatron_*.max_grad_norm", "drop", reason="ROLL reads the top-level max_grad_norm"),
    Rule("strategy_config.megatron_*.*", "drop", reason="a Megatron-Core option (kernels, fusion, recomputation, overlap): " + SPEED_REASON),
    Rule("strategy_config.fsdp2_*.max_grad_norm", "drop", reason="ROLL reads the top-level max_grad_norm"),
    Rule("strategy_config.fsdp2_*.*", "drop", reason="an FSDP2 option (sharding, wrapping, offload, reduce dtype): " + SPEED_REASON),
    Rule("strategy_config.sglang.*", "drop", reason="an SGLang engine option; roll samples with vLLM"),
    Rule("strategy_config.hf_*.*", "drop", reason="the hf backends read no strategy_config"),
    # --- workers ---
    Rule("<role>.strategy_args", "handler", "strategy"),
    Rule("<role>.device_mapping", "rename", "{0}.device_mapping", convert="device_mapping"),
    Rule("actor_infer.infer_batch_size", "drop", reason="ROLL's vLLM generation does not read it; roll's caps the requests generated in one batch, left at its default"),
    Rule("<role>.infer_batch_size", "rename", "{0}.infer_batch_size"),
    Rule("<role>.num_gpus_per_worker", "drop", reason=_PLACE),
    Rule("<role>.model_update_frequency", "drop", reason="per-role in ROLL; roll's model_update_frequency is top-level (default 1, as ROLL's)"),
    Rule("<role>.use_dynamic_batching_in_train", "handler", "train_batching"),
    Rule("<role>.max_tokens_per_microbatch_in_train", "handler", "train_batching"),
    Rule("<role>.sequence_length_round_in_train", "handler", "train_batching"),
    Rule("<role>.use_sequence_packing", "handler", "train_batching"),
    Rule("<role>.sequence_packing_args", "drop", reason=SPEED_REASON),
    Rule("<role>.use_dynamic_batching_in_infer", "drop", reason="roll batches inference by infer_batch_size; " + SPEED_REASON),
    Rule("<role>.max_tokens_per_microbatch_in_infer", "drop", reason=SPEED_REASON),
    Rule("<role>.sequence_length_round_in_infer", "drop", reason=SPEED_REASON),
    Rule("<role>.use_remove_padding", "drop", reason=SPEED_REASON),
    Rule("<role>.offload_nccl", "drop", reason=SPEED_REASON),
    Rule("<role>.logits_in_fp32", "drop", reason="roll computes log-probs in float32"),
    Rule("<role>.system_envs", "drop", reason="environment variables of ROLL's workers; export what your run needs in the shell"),
    Rule("<role>.data_args", "drop", reason=_TEMPLATE),
    Rule("<role>.name", "drop", reason="ROLL's worker name"),
    Rule("<role>.backend_timeout", "drop", reason=_PLACE),
    Rule("<role>.max_concurrency", "drop", reason=_PLACE),
    Rule("<role>.world_size", "drop", reason=_PLACE),
    Rule("<role>.worker_cls", "unsupported", reason="a custom worker class (e.g. ROLL's TOPR policy-gradient worker)", neutral=(None,)),
    Rule("<role>.pg_variant", "unsupported", reason="a policy-gradient variant other than PPO's clipped objective (e.g. TOPR)", neutral=(None, "ppo")),
    Rule("<role>.topr_*", "drop", reason="only read by ROLL's TOPR worker"),
    Rule("<role>.router_replay", "drop", reason="MoE router replay: " + SPEED_REASON),
    Rule("<role>.apply_loss_scale", "drop", reason="roll weights micro-batch losses by their share of the mini-batch"),
    Rule("<role>.mtp_training_mode", "unsupported", reason="multi-token-prediction training", neutral=(None, "disabled")),
    Rule("<role>.opd_kl_coef", "drop", reason="only read in on-policy distillation"),
    Rule("<role>.tag_included", "drop", reason="only read in on-policy distillation"),
    Rule("<role>.model_args.dtype", "rename", "{0}.model_args.dtype", convert="dtype", roll_default="bf16"),
    Rule("<role>.model_args.model_name_or_path", "unsupported", reason="a role loading another model than pretrain", neutral=(None,)),
    Rule("<role>.model_args.attn_implementation", "drop", reason="attention kernel: " + SPEED_REASON),
    Rule("<role>.model_args.flash_attn", "drop", reason=IGNORED_REASON),
    Rule("<role>.model_args.disable_gradient_checkpointing", "drop", reason="activation recomputation: " + SPEED_REASON),
    Rule("<role>.model_args.gradient_checkpointing_use_reentrant", "drop", reason=SPEED_REASON),
    Rule("<role>.model_args.model_type", "drop", reason="roll reads the model type from the model folder's config.json"),
    Rule("<role>.model_args.device_map", "drop", reason=_PLACE),
    Rule("<role>.model_args.ulysses_size", "drop", reason="Ulysses sequence parallelism: " + _PARALLEL),
    Rule("<role>.model_args.num_labels", "drop", reason="roll's critic has one value head"),
    Rule("<role>.model_args.lora_target", "unsupported", reason="LoRA: roll trains every weight", neutral=(None, "")),
    Rule("<role>.model_args.lora_*", "drop", reason="LoRA settings, read only with lora_target"),
    Rule("<role>.model_args.additional_target", "drop", reason="LoRA settings, read only with lora_target"),
    Rule("<role>.model_args.autocast_adapter_dtype", "drop", reason="LoRA settings, read only with lora_target"),
    Rule("<role>.model_args.adapter_name_or_path", "unsupported", reason="loading a LoRA adapter", neutral=(None,)),
    Rule("<role>.model_args.freeze_module_prefix", "unsupported", reason="freezing modules (e.g. a vision tower): roll trains every weight", neutral=(None, "")),
    Rule("<role>.model_args.moe_aux_loss_coef", "unsupported", reason="a MoE auxiliary loss", neutral=(None, 0, 0.0)),
    Rule("<role>.model_args.model_config_kwargs", "unsupported", reason="overrides of the model's config.json", neutral=(None, {})),
    Rule("actor_train.training_args.gradient_accumulation_steps", "handler", "accumulation"),
    Rule("<trained>.training_args.learning_rate", "rename", "{0}.training_args.learning_rate", roll_default=5e-5),
    Rule("<trained>.training_args.warmup_steps", "rename", "{0}.training_args.warmup_steps", roll_default=0),
    Rule("<trained>.training_args.weight_decay", "rename", "{0}.training_args.weight_decay"),
    Rule("<trained>.training_args.adam_beta1", "rename", "{0}.training_args.adam_beta1"),
    Rule("<trained>.training_args.adam_beta2", "rename", "{0}.training_args.adam_beta2"),
    Rule("<trained>.training_args.per_device_train_batch_size", "rename", "{0}.training_args.per_device_train_batch_size"),
    Rule("<trained>.training_args.lr_scheduler_type", "rename", "{0}.training_args.lr_scheduler_type", convert="lr_scheduler"),
    Rule("<trained>.training_args.warmup_ratio", "unsupported", reason="warm-up as a fraction of the run; set warmup_steps", neutral=(0, 0.0, None)),
    Rule("<role>.training_args.*", "drop", reason="not read here: the role is never trained, or ROLL's pipeline sets it itself (max_steps, seed, output_dir, epochs), or a precision flag model_args.dtype rules"),
)
# fmt: on
"""Every ROLL key the migration knows, first match wins (see the module docstring)."""


def _segment_matches(pattern: str, key: str) -> bool:
    if pattern == "<role>":
        return key in ROLES
    if pattern == "<trained>":
        return key in TRAINED
    return fnmatch.fnmatchcase(key, pattern)


def match_rule(keys: tuple[str, ...]) -> tuple[Rule, list[str]] | None:
    """The first rule whose pattern matches `keys` exactly, with what its wildcards matched (a `*_x` segment
    captures the part `*` stands for), or None."""
    for rule in RULES:
        parts = rule.pattern.split(".")
        if len(parts) != len(keys) or not all(
            _segment_matches(p, k) for p, k in zip(parts, keys, strict=True)
        ):
            continue
        captures = []
        for part, key in zip(parts, keys, strict=True):
            if part in ("<role>", "<trained>", "*"):
                captures.append(key)
            elif "*" in part:
                prefix, _, suffix = part.partition("*")
                captures.append(key[len(prefix) : len(key) - len(suffix)])
        return rule, captures
    return None
