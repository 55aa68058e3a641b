"""examples/qwen2.5-0.5B-agentic is a real config: it composes with the hub id `Qwen/Qwen2.5-0.5B-Instruct` resolved
from a Hugging Face cache offline, and runs end to end on the CPU with a model of Qwen2.5-0.5B's shape.

The model is `roll_strategies.build_qwen_shaped_model`: Qwen2.5-0.5B's width, heads and 151,936-token
vocabulary with random weights and fewer layers (QWEN_LAYERS), and a Qwen-style tokenizer learnt from the envs'
texts. It is laid out as a real hub-cache entry (`add_to_hub_cache`), and HF_HUB_OFFLINE=1 keeps the run off the
network, as on a machine that fetched the model once with `hf download`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.preflight import compose

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ["--config_path", "qwen2.5-0.5B-agentic", "--config_name", "agent_val_frozen_lake"]
QWEN_ID = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_LAYERS = 2  # of 24: the full width and vocabulary at a CPU test's speed (the 2 steps: see the example)

ON_THE_CPU = [
    "cluster.backend=local",
    *(f"{role}.device_mapping=[]" for role in ("actor_train", "actor_infer", "reference")),
    *(f"{role}.model_args.dtype=float32" for role in ("actor_train", "actor_infer", "reference")),
]
"""The GPU example moved to the CPU: in-process roles, float32."""

TWO_SMALL_STEPS = [
    "max_steps=2",
    "eval_steps=2",
    "save_steps=100",  # no checkpoint: it would write three 600 MB copies
    "print_baselines=false",
    "train_env_manager.num_env_groups=1",
    "train_env_manager.group_size=4",
    "val_env_manager.num_env_groups=2",
    "custom_envs.FrozenLake.max_actions_per_traj=2",
    "custom_envs.FrozenLake.max_tokens_per_step=16",
    "actor_infer.generating_args.max_new_tokens=16",
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=1",
    "track_with=[]",
    # A random model's episodes all score the same (zero advantages): an entropy term still gives a gradient, so
    # the update and the weight sync move real numbers.
    "entropy_loss_coef=0.01",
]
"""2 steps of one group of 4 episodes of at most 2 turns of 16 tokens, 2 validation episodes."""


@pytest.fixture(scope="module")
def qwen_in_hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Qwen-shaped model as `Qwen/Qwen2.5-0.5B-Instruct` in a fresh hub cache, offline; yields its snapshot."""
    from roll_pipeline.models.hub import add_to_hub_cache
    from roll_pipeline.models.warmup import vocabulary_corpus
    from roll_strategies import build_qwen_shaped_model

    root = tmp_path_factory.mktemp("qwen")
    folder = build_qwen_shaped_model(root / "model", corpus=vocabulary_corpus(), num_layers=QWEN_LAYERS)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_CACHE", str(root / "hub"))
        env.setenv("HF_HUB_OFFLINE", "1")
        yield add_to_hub_cache(folder, QWEN_ID)


def test_the_example_passes_roll_config_with_the_hub_id(qwen_in_hub_cache, capsys):
    assert cli.main(["config", *EXAMPLE]) == 0  # as written: the GPU example
    assert f"pretrain: {QWEN_ID}" in capsys.readouterr().out
    cfg = compose(*EXAMPLE[1::2], ON_THE_CPU, search_from=ROOT / "examples", preflight=True)
    frozen_lake = cfg.custom_envs["FrozenLake"]
    assert frozen_lake.env_instruction is None  # the env's own instruction, not the tiny models' ""
    assert cfg.kl_penalty == "k3" and cfg.actor_infer.generating_args.stop_strings == ["</answer>"]
    assert cfg.actor_train.training_args.learning_rate == 1e-6 and frozen_lake.max_tokens_per_step == 128


def test_a_missing_model_is_one_error_naming_the_fetch_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["config", *EXAMPLE]) == 2
    err = capsys.readouterr().err
    assert "1 problem(s)" in err and f"`hf download {QWEN_ID}`" in err


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_steps_run_end_to_end_on_the_cpu(qwen_in_hub_cache, tmp_path):
    from roll_pipeline import AgenticPipeline

    overrides = [*ON_THE_CPU, *TWO_SMALL_STEPS, f"output_dir={tmp_path}"]
    cfg = compose(*EXAMPLE[1::2], overrides, search_from=ROOT / "examples", preflight=True)
    started = time.perf_counter()
    pipeline = AgenticPipeline(cfg, progress=False)
    assert Path(pipeline.parts.model_path) == qwen_in_hub_cache
    assert pipeline.parts.tokenizer.eos_token == "<|im_end|>"
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    elapsed = time.perf_counter() - started
    assert summary.steps == 2
    rows = [json.loads(line) for line in (tmp_path / cfg.exp_name / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in trained] == [1, 2]
    for row in trained:
        assert all(math.isfinite(row[k]) for k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy"))
        assert row["actor/grad_norm"] > 0 and row["train/rows"] == 4
    assert trained[-1]["weight_sync/version"] == 2
    steps = ", ".join(f"{r['time/step_total']:.0f} s" for r in trained)
    tokens = trained[-1]["tokens/prompt_length/mean"], trained[-1]["tokens/response_length/mean"]
    print(
        f"\n[{QWEN_LAYERS}-layer Qwen2.5-0.5B shape] run {elapsed:.0f} s, steps {steps}, prompt/response {tokens}"
    )
