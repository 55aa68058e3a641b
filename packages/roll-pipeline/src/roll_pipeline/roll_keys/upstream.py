"""What ROLL itself has, at alibaba/ROLL commit 8eb27cc, as data: the top-level fields of its AgenticConfig, its
strategy names per worker section (and roll's for each), its env types and their constructor defaults. The
translation of its keys is `roll_keys.rules`; nothing of roll's is imported here either.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENV_DEFAULTS", "ENV_TYPES", "GEM_PREFIXES", "ROLL_FIELDS", "STRATEGIES"]

# fmt: off
ROLL_FIELDS = frozenset((
    "exp_name", "seed", "rpc_timeout", "output_dir", "base_dir", "logging_dir", "rollout_dump_dir",
    "track_with", "tracker_kwargs", "max_steps", "save_steps", "max_ckpt_to_keep", "logging_steps",
    "eval_steps", "rollout_batch_size", "max_running_requests", "val_batch_size", "local_rank",
    "resume_from_checkpoint", "checkpoint_config", "prompt_length", "response_length", "sequence_length",
    "val_prompt_length", "val_sequence_length", "profiler_timeline", "profiler_memory",
    "report_length_and_rewards", "is_offload_states", "is_offload_optimizer_states_in_train_step",
    "length_profiler_dir", "profiler_output_dir", "otlp_output_dir", "system_envs",
    "model_update_buffer_size_mb", "num_nodes", "num_gpus_per_node", "model_download_type", "rollout_mock",
    "transfer_backend", "generate_opt_level", "is_num_return_sequences_expand", "is_use_additional_prompts",
    "max_additional_running_prompts", "user_defined_rollout_loop_cls", "router_args", "pretrain",
    "reward_pretrain", "actor_train", "actor_infer", "critic", "reference", "reward", "async_generation_ratio",
    "ppo_epochs", "max_grad_norm", "l2", "lambd", "gamma", "pg_clip", "use_pg_clip_range", "pg_clip_low",
    "pg_clip_high", "value_clip", "kl_penalty", "target_kl", "init_kl_coef", "kl_horizon",
    "use_reward_scaling", "add_len_reward", "reward_clip", "use_reward_norm", "whiten_rewards",
    "whiten_advantages", "advantage_clip", "adv_estimator", "norm_mean_type", "norm_std_type",
    "add_token_level_kl", "critic_warmup", "use_kl_loss", "kl_loss_coef", "entropy_loss_coef", "loss_agg_mode",
    "dual_clip_loss", "enable_reference", "enable_old_logprobs_recompute",
    "force_disable_old_logprobs_recompute", "train_infer_correction", "pure_opd_pipeline_type", "teacher",
    "student_train", "student_infer", "is_pure_opd", "use_opd", "custom_envs", "train_env_manager",
    "val_env_manager", "render_save_dir", "reward_normalization", "env_monitor", "dirty_data_mask",
    "open_feedback_turn", "use_token_reward", "batch_adjust_mode", "episode_reward_weight",
    "step_reward_weight", "step_reward_gamma", "ratio_type", "exp_mode", "partial_gpu_mode",
    "parse_tool_call_parameter_to_dict", "skip_mock_system_prompt",
))
# fmt: on
"""Top-level fields of ROLL's AgenticConfig (8eb27cc). ROLL's launcher (dacite) ignores any other key."""

STRATEGIES: dict[str, dict[str, tuple[str, str]]] = {
    "actor_train": {
        "megatron_train": ("deepspeed_train", "Megatron-Core -> DeepSpeed data parallelism"),
        "fsdp2_train": ("deepspeed_train", "FSDP2 -> DeepSpeed ZeRO-3 (weights sharded, as FSDP does)"),
        "deepspeed_train": ("deepspeed_train", ""),
        "hf_train": ("hf_train", ""),
    },
    "actor_infer": {
        "vllm": ("vllm", ""),
        "sglang": ("vllm", "SGLang -> vLLM (the same sampling, another engine)"),
        "hf_infer": ("hf_infer", ""),
    },
    "reference": {
        name: ("hf_infer", "the reference only scores tokens: roll's hf_infer" if name != "hf_infer" else "")
        for name in (
            "hf_infer",
            "hf_train",
            "megatron_infer",
            "megatron_train",
            "fsdp2_infer",
            "fsdp2_train",
            "deepspeed_infer",
            "deepspeed_train",
        )
    },
    "critic": {
        name: ("hf_critic", "roll's critic backend")
        for name in ("megatron_train", "fsdp2_train", "deepspeed_train", "hf_train")
    },
}
"""ROLL strategy_name -> (roll strategy_name, what changes) per worker section."""

ENV_TYPES: dict[str, tuple[str, str]] = {
    "frozen_lake": ("frozen_lake", ""),
    "sokoban": ("sokoban", ""),
    "webshop": (
        "webshop_lite",
        "roll's webshop_lite: WebShop-style shopping over a generated catalogue, not the original WebShop"
        " (its products, instructions and reward differ)",
    ),
}
"""ROLL env_type -> (roll env id, what differs; empty when it is the same game)."""

GEM_PREFIXES = ("game:", "math:", "code:", "qa:", "rg:", "eval:", "tool:")
"""ROLL env types of GEM (`gem.make` ids)."""

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "frozen_lake": {"is_slippery": True, "max_steps": 20, "format_penalty": 0.0, "size": 4, "p": 0.8},
    "sokoban": {
        "dim_room": [10, 10],
        "num_boxes": 4,
        "search_depth": 300,
        "max_steps": 20,
        "format_penalty": 0.0,
    },
}
"""Constructor defaults of ROLL's envs (8eb27cc), set explicitly where a file leaves them out."""
