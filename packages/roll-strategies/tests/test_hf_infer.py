from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from roll_strategies import (
    GenerationParams,
    HFInferStrategy,
    HFTrainStrategy,
    ModelNotFoundError,
    StrategyError,
    WeightSyncError,
)


@pytest.fixture(scope="module")
def infer(tiny_model_dir) -> HFInferStrategy:
    return HFInferStrategy(tiny_model_dir, seed=7)


def _prompts(strategy: HFInferStrategy, toy, n: int) -> list[list[int]]:
    rng = random.Random(5)
    tok = strategy.tokenizer
    out = []
    for i in range(n):
        size = 2 + i % 3
        text = tok.apply_chat_template(
            toy.chat(toy.grid_observation(rng, size)), add_generation_prompt=True, tokenize=False
        )
        out.append(tok.encode(text, add_special_tokens=False))
    return out


def test_log_probs_match_train_strategy_recomputation(infer, tiny_model_dir, toy):
    train = HFTrainStrategy(tiny_model_dir, trainable=False)
    prompts = _prompts(infer, toy, 3)
    outputs = infer.generate(prompts, GenerationParams(max_new_tokens=12, temperature=1.0))
    for prompt, out in zip(prompts, outputs, strict=True):
        assert len(out.output_ids) == len(out.log_probs) >= 1
        ids = torch.tensor([prompt + out.output_ids])
        lp = train.compute_log_probs({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 4)
        np.testing.assert_allclose(lp[0, len(prompt) :].numpy(), out.log_probs, atol=1e-4)


def test_temperature_scales_returned_log_probs(infer, toy):
    prompt = _prompts(infer, toy, 1)
    cold = infer.generate(prompt, GenerationParams(max_new_tokens=4, greedy=True))[0]
    hot = infer.generate(prompt, GenerationParams(max_new_tokens=1, temperature=0.5, top_k=1))[0]
    assert hot.output_ids[0] == cold.output_ids[0]  # top_k=1 sampling is argmax
    assert hot.log_probs[0] > cold.log_probs[0]  # sharper distribution at T=0.5


def test_left_padding_does_not_change_results(infer, toy):
    short, long = _prompts(infer, toy, 3)[0], _prompts(infer, toy, 3)[2]
    assert len(long) > len(short)
    params = GenerationParams(max_new_tokens=6, greedy=True)
    alone = infer.generate([short], params)[0]
    batched = infer.generate([long, short], params)[1]
    assert alone.output_ids == batched.output_ids
    np.testing.assert_allclose(alone.log_probs, batched.log_probs, atol=1e-4)


def test_seeded_sampling_is_reproducible(tiny_model_dir, toy):
    a, b = HFInferStrategy(tiny_model_dir, seed=1), HFInferStrategy(tiny_model_dir, seed=1)
    prompts = _prompts(a, toy, 4)
    params = GenerationParams(max_new_tokens=8)
    first = [a.generate(prompts, params), a.generate(prompts, params)]
    assert first == [b.generate(prompts, params), b.generate(prompts, params)]
    assert first[0] != first[1]  # the per-call counter moves the seed


def test_stop_token_and_finish_reasons(infer, toy):
    prompt = _prompts(infer, toy, 1)
    first = infer.generate(prompt, GenerationParams(max_new_tokens=3, greedy=True))[0]
    assert first.finish_reason == "length" and len(first.output_ids) == 3
    stop = first.output_ids[1]  # make the second greedy token a stop token
    end = first.output_ids.index(stop) + 1  # (the first token may be the same id)
    out = infer.generate(prompt, GenerationParams(max_new_tokens=3, greedy=True, stop_token_ids=(stop,)))[0]
    assert out.finish_reason == "stop" and out.output_ids == first.output_ids[:end]
    assert out.log_probs == pytest.approx(first.log_probs[:end], abs=1e-5)


def test_stop_at_eos_after_warmup(warm_model_dir, toy):
    strategy = HFInferStrategy(warm_model_dir)
    outs = strategy.generate(_prompts(strategy, toy, 4), GenerationParams(max_new_tokens=10))
    for out in outs:
        assert out.finish_reason == "stop" and out.output_ids[-1] == strategy.tokenizer.eos_token_id
        assert strategy.tokenizer.decode(out.output_ids, skip_special_tokens=True).startswith("<answer>")


def test_update_weights_is_strict(infer, tiny_model_dir):
    weights = HFTrainStrategy(tiny_model_dir, trainable=False).export_weights()
    infer.update_weights(weights, version=3)
    assert infer.policy_version == 3
    with pytest.raises(WeightSyncError, match="missing"):
        infer.update_weights({k: v for k, v in weights.items() if "q_proj" not in k}, version=4)
    with pytest.raises(WeightSyncError, match="unexpected"):
        infer.update_weights({**weights, "extra.weight": np.zeros(2)}, version=4)
    bad = dict(weights)
    bad["model.norm.weight"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(WeightSyncError, match="shape"):
        infer.update_weights(bad, version=4)
    assert infer.policy_version == 3


def test_clear_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"build_tiny_model\.py"):
        HFInferStrategy(tmp_path / "nowhere")
    with pytest.raises(StrategyError, match="greedy=True"):
        GenerationParams(max_new_tokens=4, temperature=0.0)


def test_too_long_prompt_is_refused(infer):
    with pytest.raises(StrategyError, match="max_position_embeddings"):
        infer.generate([[10] * 2045], GenerationParams(max_new_tokens=4))
