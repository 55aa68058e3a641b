"""Weight sync on the tiny model: one-shot float32 export vs bucketed (run as plain tests by default).

    uv run pytest benchmarks/test_bench_weight_sync.py --benchmark-enable

The full table (tiny and a Qwen2.5-0.5B-shaped model, peak memory) comes from
`uv run python benchmarks/weight_sync.py`; see docs/benchmarks.md.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from roll_strategies import WeightExporter, WeightReceiver, export_named_weights, load_named_weights
from roll_strategies.sync.weights import tensor_shape, unique_named_tensors
from transformers import Qwen2Config, Qwen2ForCausalLM
from weight_sync import MODELS

TINY = Qwen2Config(**MODELS["tiny"])  # the tiny model of the full table


def _pair(dtype: torch.dtype) -> tuple[Qwen2ForCausalLM, WeightReceiver, Qwen2ForCausalLM]:
    torch.manual_seed(0)
    train, infer = Qwen2ForCausalLM(TINY), Qwen2ForCausalLM(TINY).to(dtype)
    expected = {n: tensor_shape(t) for n, t in unique_named_tensors(infer).items()}
    return train, WeightReceiver(expected, lambda tensors: load_named_weights(infer, tensors)), infer


def test_one_shot_float32(benchmark):
    train, receiver, infer = _pair(torch.float32)
    versions = itertools.count(1)
    benchmark(lambda: receiver.replace(export_named_weights(train), next(versions)))
    assert torch.equal(infer.model.embed_tokens.weight, train.model.embed_tokens.weight)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bucketed(benchmark, dtype):
    train, receiver, infer = _pair(getattr(torch, dtype))
    exporter, versions = WeightExporter(train), itertools.count(1)

    def sync() -> dict[str, float] | None:
        plan = exporter.plan(next(versions), dtype=dtype, bucket_bytes=256 << 10)
        return [receiver.receive(exporter.bucket(plan, i)) for i in range(plan.num_buckets)][-1]

    metrics = benchmark(sync)
    assert metrics is not None and metrics["weight_sync/buckets"] > 1
    assert torch.equal(infer.model.norm.weight, train.model.norm.weight.to(infer.dtype))
