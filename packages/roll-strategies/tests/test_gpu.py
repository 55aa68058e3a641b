"""CUDA paths of the HF and DeepSpeed strategies; skipped without a GPU (no GPU was lent when these were written)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from roll_strategies import (
    GenerationParams,
    HFInferStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    sync_weights,
)

pytestmark = pytest.mark.gpu


def _batch(seed: int, rows: int = 8, width: int = 16) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 200, (rows, width), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def nll_loss(log_probs, entropy, mb):
    return -log_probs[:, 1:].mean(), {}


def test_hf_train_on_cuda_syncs_bucketed_bf16_weights(tiny_model_dir):
    train = HFTrainStrategy(tiny_model_dir, device="cuda", optimizer=OptimizerSettings(learning_rate=3e-3))
    infer = HFInferStrategy(tiny_model_dir, device="cuda", dtype="bfloat16")
    first = train.train_step([_batch(0)], nll_loss, with_entropy=True)
    for _ in range(3):
        last = train.train_step([_batch(0)], nll_loss, with_entropy=True)
    assert last["loss"] < first["loss"]
    metrics = sync_weights(train, infer, version=1, dtype="bfloat16", bucket_bytes=100_000)
    reference = HFInferStrategy(tiny_model_dir, device="cuda", dtype="bfloat16")
    reference.update_weights(train.export_weights(), version=1)
    assert metrics["weight_sync/buckets"] > 1
    assert torch.equal(infer.compute_log_probs(_batch(1), 8), reference.compute_log_probs(_batch(1), 8))


def test_hf_infer_sleep_frees_gpu_memory(tiny_model_dir):
    infer = HFInferStrategy(tiny_model_dir, device="cuda")
    held = torch.cuda.memory_allocated()
    infer.sleep()
    assert torch.cuda.memory_allocated() < held
    infer.wake_up()
    assert infer.compute_log_probs(_batch(2), 8).shape == (8, 16)


def test_hf_infer_next_turns_on_cuda_sample_as_the_plain_path(tiny_model_dir):
    """Kept turns on the GPU: three turns of 4 episodes, greedy, the plain path's tokens; sleep forgets them."""
    params = GenerationParams(max_new_tokens=8, greedy=True)
    plain = HFInferStrategy(tiny_model_dir, device="cuda")
    shared = HFInferStrategy(tiny_model_dir, device="cuda", share_prefix=True)
    prompts = [[2, *range(10, 30), 40 + episode] for episode in range(4)]
    for turn in range(3):
        expected, got = (
            s.generate(prompts, params, [10 * turn + e for e in range(4)]) for s in (plain, shared)
        )
        for a, b in zip(expected, got, strict=True):
            assert a.output_ids == b.output_ids
            torch.testing.assert_close(
                torch.tensor(b.log_probs), torch.tensor(a.log_probs), atol=1e-4, rtol=0
            )
        prompts = [p + o.output_ids + [50, 51, 52] for p, o in zip(prompts, expected, strict=True)]
    assert len(shared.turns) == 4
    shared.sleep()
    assert len(shared.turns) == 0


DEEPSPEED_ON_CUDA = textwrap.dedent(
    """
    import json, sys, torch
    from roll_strategies import HFTrainStrategy, OptimizerSettings, create_strategy
    model_dir, stage, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    def batch(seed):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(8, 200, (8, 16), generator=gen)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    def loss(lp, ent, mb):
        return -lp[:, 1:].mean(), {}
    kw = dict(device="cuda", dtype=dtype, optimizer=OptimizerSettings(learning_rate=3e-3, warmup_steps=2))
    hf = HFTrainStrategy(model_dir, **{**kw, "dtype": "float32"})  # the fp32 reference
    ds = create_strategy("deepspeed_train", "train", model_dir, strategy_config={"zero_optimization": {"stage": stage}}, **kw)
    curves = [[s.train_step([batch(i), batch(i + 50)], loss, with_entropy=False)["loss"] for i in range(4)] for s in (hf, ds)]
    print(json.dumps(curves))
    """
)


@pytest.mark.deepspeed
@pytest.mark.parametrize(("stage", "dtype", "tolerance"), [(2, "float32", 1e-4), (3, "bfloat16", 2e-2)])
def test_deepspeed_on_cuda_follows_hf_train(tiny_model_dir, stage, dtype, tolerance):
    # its own process: nccl, not the gloo group the CPU tests of this session may have set up
    out = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_ON_CUDA, str(tiny_model_dir), str(stage), dtype],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    hf, ds = json.loads(out.stdout.strip().splitlines()[-1])
    assert ds == pytest.approx(hf, abs=tolerance)
    assert ds[-1] < ds[0]
