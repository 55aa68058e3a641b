"""End to end: the real pipeline (tiny model, FrozenLake, Ray actors) for a few steps, then a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roll_pipeline import AgenticPipeline, CheckpointManager
from roll_pipeline.config.compose import compose
from small_runs import FEW_WORKERS, SMALL_FROZEN_LAKE, steps

SMALL = [*steps(3), *SMALL_FROZEN_LAKE, *FEW_WORKERS]


def run(tmp_path: Path, *extra: str):
    cfg = compose(None, None, [*SMALL, f"output_dir={tmp_path}", *extra])
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        return cfg, pipeline.run()
    finally:
        pipeline.close()


@pytest.mark.ray
@pytest.mark.slow
def test_three_steps_through_ray_write_a_loadable_checkpoint(tmp_path, ray_session):
    from transformers import AutoModelForCausalLM

    _cfg, summary = run(tmp_path, "exp_name=e2e_ray")
    assert summary.steps == 3
    assert [step for step, _ in summary.val_history] == [0, 3]
    ckpt = summary.last_checkpoint
    assert ckpt is not None and ckpt.name == "checkpoint-3"
    assert CheckpointManager(ckpt.parent).latest() == ckpt
    assert CheckpointManager.load_state(ckpt)["step"] == 3
    model = AutoModelForCausalLM.from_pretrained(CheckpointManager.model_dir(ckpt))
    assert sum(p.numel() for p in model.parameters()) > 10_000
    run_dir = tmp_path / "e2e_ray"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # step 0: the validation before training
    # the first validation has no pass before it to count flips against (`val/flips/*`)
    first_val = {k for k in rows[-1] if k.startswith("val/") and not k.startswith("val/flips/")}
    assert set(rows[0]) == {"step", "time/step_val", *first_val}
    assert {"val/flips/fail_to_success", "val/flips/success_to_fail"} <= set(rows[-1])
    for key in (
        "actor/pg_loss",
        "actor/entropy",
        "env/FrozenLake/success",
        "val/score/mean",
        "val/env/FrozenLake/success",
        "time/step_rollout",
        "time/step_train",
        "critic/score/mean",
    ):
        assert key in rows[-1], key
    assert rows[-1]["train/nonfinite_steps"] == 0  # optimizer steps skipped for NaN/inf, reported every step
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_local_backend_runs_and_resumes_from_a_checkpoint(tmp_path):
    _, first = run(
        tmp_path,
        "exp_name=e2e_local",
        "cluster.backend=local",
        "async_generation_ratio=0",  # lockstep: the sampler's weights are the trainer's (checked below)
        "max_steps=2",
        "save_steps=2",
        "recompute_old_log_probs=true",
        "actor_train.training_args.learning_rate=1e-3",
        "actor_train.training_args.lr_scheduler_type=linear",
        "actor_train.training_args.warmup_steps=0",
    )
    assert first.steps == 2 and first.last_checkpoint is not None
    rows = [json.loads(line) for line in (tmp_path / "e2e_local" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] > 0]
    # linear decay over max_steps=2 pipeline steps: full lr at step 1, half at step 2
    assert [r["actor/lr"] for r in rows] == pytest.approx([1e-3, 5e-4])
    # The sampler's log-probs equal the trainer's: why recompute_old_log_probs=false is safe here.
    assert all(r["actor/train_infer_logprob_diff"] < 1e-4 for r in rows)
    _, resumed = run(
        tmp_path,
        "exp_name=e2e_local",
        "cluster.backend=local",
        "async_generation_ratio=0",
        "max_steps=3",
        f"resume_from_checkpoint={first.last_checkpoint}",
        "recompute_old_log_probs=false",
    )
    assert resumed.steps == 3
    last = json.loads((tmp_path / "e2e_local" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3 and "actor/train_infer_logprob_diff" not in last  # the sampler's were reused
    assert resumed.last_checkpoint.name == "checkpoint-3"


@pytest.mark.slow
def test_forward_kl_and_a_temperature_schedule_run_end_to_end(tmp_path):
    run(
        tmp_path,
        "exp_name=e2e_explore",
        "cluster.backend=local",
        "async_generation_ratio=0",  # lockstep: step 2's episodes are all sampled after the schedule's change
        "max_steps=2",
        "kl_penalty=full_forward",
        "recompute_old_log_probs=true",
        "actor_infer.generating_args.temperature_schedule=[[2,1.5]]",
    )
    rows = [
        json.loads(line) for line in (tmp_path / "e2e_explore" / "metrics.jsonl").read_text().splitlines()
    ]
    rows = [r for r in rows if r["step"] > 0]
    assert [r["rollout/temperature"] for r in rows] == [1.0, 1.5]  # from step 2 on, as the metrics count
    for r in rows:
        # KL(ref || pi) at the sampled model: > 0 once the actor has moved, finite, and in the loss
        assert (
            -1e-6 <= r["critic/kl"] < 10 and -1e-6 <= r["actor/kl_loss"] < 10
        )  # 0 up to float rounding at step 1
        assert 0.0 <= r["critic/score/flat_groups"] <= 1.0
    assert rows[-1]["critic/kl"] > 0


@pytest.mark.slow
def test_optimiser_settings_reach_the_train_worker(tmp_path):
    cfg = compose(
        None,
        None,
        [
            *SMALL,
            f"output_dir={tmp_path}",
            "cluster.backend=local",
            "actor_train.training_args.adam_beta2=0.98",
            "actor_train.training_args.adam_epsilon=1e-5",
        ],
    )
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        group = pipeline.parts.actor_train.main.strategy.optimizer.param_groups[0]
        assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-5
    finally:
        pipeline.close()


@pytest.mark.slow
def test_validation_episodes_are_rendered_as_gifs_and_tensorboard_images(tmp_path):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, summary = run(
        tmp_path,
        "exp_name=e2e_render",
        "cluster.backend=local",
        "max_steps=1",
        "train_env_manager.num_env_groups=1",
        "val_env_manager.num_env_groups=4",
        "actor_train.training_args.per_device_train_batch_size=4",
        "actor_train.training_args.gradient_accumulation_steps=1",
        "render_save_dir=renders",
        "render_episodes_per_tag=3",
    )
    assert [step for step, _ in summary.val_history] == [0, 1]
    run_dir = tmp_path / "e2e_render"
    for step in (0, 1):
        gifs = sorted((run_dir / "renders" / f"step-{step:06d}").glob("FrozenLake-seed*-*.gif"))
        assert len(gifs) == 3, gifs
        for gif in gifs:
            assert gif.stem.rsplit("-", 1)[1] in ("success", "fail")
            with Image.open(gif) as image:
                assert image.n_frames >= 2  # the start and at least one turn
    last = summary.val_history[-1][1]
    assert last["val/render/gifs"] == 3 and last["val/render/replay_mismatches"] == 0
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0}).Reload()
    tags = [t for t in events.Tags()["images"] if t.startswith("val/render/FrozenLake/seed")]
    assert len(tags) == 3
    assert sorted(e.step for e in events.Images(tags[0])) == [0, 1]


@pytest.mark.slow
def test_every_validation_row_is_logged_whatever_logging_steps_is(tmp_path):
    """logging_steps=3 does not divide eval_steps=2: the validations of steps 2 and 4 still reach the
    trackers (metrics.jsonl and TensorBoard), beside the logging step 3."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run(
        tmp_path,
        "exp_name=val_rows",
        "cluster.backend=local",
        "max_steps=4",
        "eval_steps=2",
        "save_steps=4",
        "logging_steps=3",
    )
    run_dir = tmp_path / "val_rows"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 3, 4]
    assert [r["step"] for r in rows if "val/env/FrozenLake/success" in r] == [0, 2, 4]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/env/FrozenLake/success")] == [0, 2, 4]


@pytest.mark.slow
def test_validate_at_start_false_skips_only_the_first_validation(tmp_path):
    """No validation before step 1: the first validation row is step 2's, and the run's summary holds only it."""
    _cfg, summary = run(
        tmp_path,
        "exp_name=no_start",
        "cluster.backend=local",
        "validate_at_start=false",
        "max_steps=2",
        "eval_steps=2",
        "save_steps=2",
    )
    assert [step for step, _ in summary.val_history] == [2]
    rows = [json.loads(line) for line in (tmp_path / "no_start" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/env/FrozenLake/success" in r] == [2]
