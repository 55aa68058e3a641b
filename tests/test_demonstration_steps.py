"""`demonstration_steps`: the first steps play episodes the envs answer and train the actor on those answers
with the sft loss, end to end on the tiny model; `roll config` refuses an env that cannot demonstrate."""

from __future__ import annotations

import pytest
from roll_pipeline.config.compose import ConfigError
from roll_pipeline.observe.plotting import read_metrics
from roll_pipeline.preflight import check_demonstrations, compose
from small_runs import FEW_WORKERS, SMALL_FROZEN_LAKE, run_to_end, steps


def test_demonstration_steps_clone_the_expert_then_rl_takes_over(tmp_path):
    overrides = [
        *steps(4),
        *SMALL_FROZEN_LAKE,
        *FEW_WORKERS,
        "custom_envs.FrozenLake.max_actions_per_traj=10",  # shortest paths on 4x4 maps run up to 9 moves
        "cluster.backend=local",
        "demonstration_steps=3",
        # the cloning steps play 8 groups of 1 (8 distinct maps a step), RL the training envs' 2 groups of 4
        "+demonstration_env_manager={num_env_groups: 8, group_size: 1, max_env_num_per_worker: 8}",
        "logging_steps=1",
        "actor_train.training_args.learning_rate=1e-3",
        "demonstration_learning_rate=3e-3",
        "actor_train.training_args.warmup_steps=0",  # a constant rate: each step's lr is its phase's
        "actor_train.training_args.lr_scheduler_type=constant",
        "recompute_old_log_probs=true",
        f"output_dir={tmp_path}",
        "exp_name=demo",
    ]
    run_to_end(compose(None, None, overrides, preflight=True))
    rows = read_metrics(tmp_path / "demo")
    rows = {r["step"]: r for r in rows if r["step"] > 0}
    assert [rows[s]["train/demonstration_step"] for s in (1, 2, 3, 4)] == [1.0, 1.0, 1.0, 0.0]
    assert [rows[s]["rollout/distinct_episodes"] for s in (1, 2, 3, 4)] == [8.0, 8.0, 8.0, 2.0]
    # cloning at demonstration_learning_rate, RL at the actor's learning_rate
    assert [rows[s]["actor/lr"] for s in (1, 2, 3, 4)] == pytest.approx([3e-3, 3e-3, 3e-3, 1e-3], rel=1e-9)
    # the expert's shortest paths reach every goal, and sft clips nothing
    assert all(rows[s]["env/FrozenLake/success"] == 1.0 for s in (1, 2, 3))
    assert all(rows[s]["actor/pg_clipfrac"] == 0.0 for s in (1, 2, 3))
    # an sft loss is the answers' negative log-likelihood: positive (ppo's surrogate averages near 0)
    assert all(rows[s]["actor/pg_loss"] > 0.01 for s in (1, 2, 3))
    assert rows[4]["env/FrozenLake/success"] <= 1.0 and "actor/pg_loss" in rows[4]
    # sft reads no old log-probs: a demonstration step does not recompute them, the RL step does
    assert all("actor/train_infer_logprob_diff" not in rows[s] for s in (1, 2, 3))
    assert "actor/train_infer_logprob_diff" in rows[4]
    # the RL step's diagnostics: its turns sampled off the argmax, and the KL to the policy it started from
    # (the cloned one), measured at its validation on its own rows after its update
    assert 0.0 <= rows[4]["actor/sampled_not_greedy"] <= 1.0
    assert rows[4]["signal/kl_to_start/k3"] > 0.0
    assert all("signal/kl_to_start/k3" not in rows[s] for s in (1, 2, 3))


@pytest.mark.parametrize(
    ("kl_reference", "kl_penalty"),
    [("rl_start", "full_forward"), ("rl_start", "k3"), ("pretrained", "full_forward")],
)
def test_a_reference_at_the_rl_start_is_the_cloned_policy(tmp_path, kl_reference, kl_penalty):
    """With kl_reference: rl_start the first RL step's reference is the policy that step starts from (the clone),
    whether the trainer holds it (full_forward) or a reference worker does (k3): the KL that step measures before
    its update is 0; against the pretrained model it is not."""
    from roll_pipeline import AgenticPipeline

    overrides = [
        *steps(2),
        *SMALL_FROZEN_LAKE,
        *FEW_WORKERS,
        "val_env_manager.num_env_groups=1",
        "validate_at_start=false",
        "cluster.backend=local",
        "demonstration_steps=1",
        "demonstration_learning_rate=3e-3",
        "actor_train.training_args.warmup_steps=0",  # the cloning step moves the policy at its full rate
        f"kl_penalty={kl_penalty}",
        f"kl_reference={kl_reference}",
        f"output_dir={tmp_path}",
        "exp_name=run",
    ]
    pipeline = AgenticPipeline(compose(None, None, overrides), progress=False)
    try:
        pipeline.run()
    finally:
        pipeline.close()
    rows = read_metrics(tmp_path / "run")
    rl_step = next(r for r in rows if r["step"] == 2)
    assert rl_step["train/demonstration_step"] == 0.0
    if kl_reference == "rl_start":
        # k3 compares the sampler's log-probs with the reference worker's: the same weights, the same numbers
        assert abs(rl_step["critic/kl"]) < 1e-6
    else:
        assert rl_step["critic/kl"] > 1e-3


def test_roll_config_refuses_an_env_without_demonstrations():
    problems = check_demonstrations(
        {
            "pretrain": "builtin:tiny-frozen-lake",
            "demonstration_steps": 2,
            "custom_envs": {"Pick": {"env_type": "four_choice"}},
            "train_env_manager": {"tags": ["Pick"]},
            "val_env_manager": {"tags": ["Pick"]},
        }
    )
    assert len(problems) == 1 and "custom_envs.Pick (four_choice) gives no demonstration" in problems[0]
    assert "demonstration_steps: 0" in problems[0]
    # the envs the demonstration steps play are checked, not the training envs
    problems = check_demonstrations(
        {
            "pretrain": "builtin:tiny-frozen-lake",
            "demonstration_steps": 2,
            "custom_envs": {"Pick": {"env_type": "four_choice"}, "FrozenLake": {"env_type": "frozen_lake"}},
            "train_env_manager": {"tags": ["FrozenLake"]},
            "demonstration_env_manager": {"tags": ["Pick"]},
            "val_env_manager": {"tags": ["FrozenLake"]},
        }
    )
    assert len(problems) == 1 and "custom_envs.Pick (four_choice) gives no demonstration" in problems[0]
    with pytest.raises(ConfigError, match="does not start with response_prefix 'Move:'"):
        compose(
            None,
            None,
            ["demonstration_steps=1", "custom_envs.FrozenLake.response_prefix=Move:"],
            preflight=True,
        )
