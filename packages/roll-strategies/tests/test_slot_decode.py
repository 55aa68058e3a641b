"""hf_infer's static-cache slot decoder (`decode="static"`) against the HF `generate` path on the same weights:
the same tokens, finish reasons and log-probs (to 1e-5) greedy and keyed-sampled, with fewer slots than prompts
(slots refilled), repeated prompts, stop ids and stop strings, kept turns under share_prefix; and its refusals."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
from roll_strategies import GenerationParams, HFInferStrategy, StrategyError, build_tiny_model
from roll_strategies.infer.sampling import step_uniforms
from roll_strategies.infer.slot_cache import SlotKVCache

GREEDY = GenerationParams(max_new_tokens=12, greedy=True)
SAMPLED = GenerationParams(max_new_tokens=12, temperature=0.8, top_p=0.9, top_k=20)
STATIC = {"decode": "static", "decode_slots": 3}


@pytest.fixture(params=["qwen2", "llama"])
def folder(request, tiny_model_dir, llama_model_dir):
    return tiny_model_dir if request.param == "qwen2" else llama_model_dir


def _prompts(strategy: HFInferStrategy, toy, n: int, seed: int = 3) -> list[list[int]]:
    rng = random.Random(seed)
    texts = [
        strategy.tokenizer.apply_chat_template(
            toy.chat(toy.grid_observation(rng, rng.choice((2, 3, 4)))),
            add_generation_prompt=True,
            tokenize=False,
        )
        for _ in range(n)
    ]
    return [strategy.tokenizer.encode(text, add_special_tokens=False) for text in texts]


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "t0.8-topp-topk"])
def test_static_decoding_samples_as_the_generate_path(folder, toy, params, assert_same):
    """7 prompts of other lengths (one repeated, as a group's samples) on 3 slots: rows finish and slots refill
    while others decode; rows with sample keys and rows keyed by (call, row) both agree."""
    plain = HFInferStrategy(folder, seed=5)
    static = HFInferStrategy(folder, seed=5, strategy_config=STATIC)
    assert static.decoder is not None and plain.decoder is None  # the CPU default stays generate
    prompts = _prompts(plain, toy, 6)
    prompts.append(prompts[1])
    assert len({len(p) for p in prompts}) > 2
    keys = list(range(40, 47))
    assert_same(plain.generate(prompts, params, keys), static.generate(prompts, params, keys))
    assert_same(plain.generate(prompts, params), static.generate(prompts, params))


def test_stop_ids_and_stop_strings_end_rows_as_the_generate_path(tiny_model_dir, toy, assert_same):
    plain = HFInferStrategy(tiny_model_dir, seed=2)
    static = HFInferStrategy(tiny_model_dir, seed=2, strategy_config=STATIC)
    prompts = _prompts(plain, toy, 5, seed=8)
    free = plain.generate(prompts, SAMPLED, list(range(5)))
    stop_id = free[0].output_ids[3]  # a token some row samples early: that row ends there
    text = plain.tokenizer.decode(free[1].output_ids[2:4])
    params = dataclasses.replace(SAMPLED, stop_token_ids=(stop_id,), stop_strings=(text,))
    expected = plain.generate(prompts, params, list(range(5)))
    assert sum(o.finish_reason == "stop" for o in expected) >= 2
    assert_same(expected, static.generate(prompts, params, list(range(5))))


def test_next_turns_reuse_kept_turns_and_sample_as_the_generate_path(folder, toy, assert_same):
    """share_prefix: each finished sequence is kept, and the next turn's prefill runs only its new ids (one
    forward over the 3 distinct rests, fewer columns than a whole prompt), with the plain path's outputs."""
    plain = HFInferStrategy(folder, seed=7)
    static = HFInferStrategy(folder, seed=7, share_prefix=True, strategy_config={"decode": "static"})
    rng = random.Random(1)
    prompts = _prompts(plain, toy, 3, seed=11)
    widths: list[int] = []
    hook = static.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: widths.append(int(args[0].shape[1]))
    )
    previous_new: list[int] = []
    for turn in range(2):
        keys = [10 * turn + episode for episode in range(3)]
        widths.clear()
        expected = plain.generate(prompts, SAMPLED, keys)
        assert_same(expected, static.generate(prompts, SAMPLED, keys))
        glue = [static.tokenizer.encode(f"\n{toy.grid_observation(rng, 3)}\n") for _ in prompts]
        new = [1 + len(g) for g in glue]  # kept: the prompt and sampled ids but the last, which runs now
        if turn:
            assert widths[0] == max(previous_new) < min(map(len, prompts)) - 8, widths
        previous_new = new
        prompts = [p + o.output_ids + g for p, o, g in zip(prompts, expected, glue, strict=True)]
    hook.remove()
    assert len(static.turns) == 3  # each turn's sequence replaced the one it extended


def test_the_static_decoder_is_refused_where_it_would_not_be_exact(tmp_path_factory, toy, tiny_model_dir):
    windowed = build_tiny_model(
        tmp_path_factory.mktemp("slots-windowed") / "model", vocab_texts=[toy.SYSTEM], sliding_window=8
    )
    with pytest.raises(StrategyError, match=r"sliding-window layer.*set decode to 'generate'"):
        HFInferStrategy(windowed, strategy_config={"decode": "static"})
    assert HFInferStrategy(windowed, strategy_config={"decode": "auto"}).decoder is None
    with pytest.raises(
        StrategyError, match=r"only 'decode', 'decode_slots', 'decode_graphs'.*\['max_num_seqs'\]"
    ):
        HFInferStrategy(tiny_model_dir, strategy_config={"max_num_seqs": 4})
    with pytest.raises(StrategyError, match="Expected decode in"):
        HFInferStrategy(tiny_model_dir, strategy_config={"decode": "paged"})


def test_per_row_steps_draw_each_rows_own_uniforms():
    """A slot's draw at its own step equals the draw `generate`'s sampler makes for that row at that step."""
    keys = np.array([3, 99, 2**63 + 5], dtype=np.uint64)
    steps = np.array([0, 7, 2], dtype=np.uint64)
    expected = [step_uniforms(keys[b : b + 1], int(steps[b]))[0] for b in range(3)]
    np.testing.assert_array_equal(step_uniforms(keys, steps), expected)


def test_a_slot_cache_write_lands_in_its_slot_and_columns_only(tiny_model_dir):
    strategy = HFInferStrategy(tiny_model_dir)
    cache = SlotKVCache(strategy.model, slots=3, length=8)
    keys = cache.keys[0]
    new = keys.new_ones((2, keys.shape[1], 2, keys.shape[3]))
    cache.target(torch.tensor([2, 0]), torch.tensor([[4, 5], [0, 1]]))
    out, _ = cache.update(new, new * 2, 0)
    assert out.shape == (2, *keys.shape[1:])
    written = (keys != 0).any(dim=(1, 3))  # [slot, column]
    assert written.nonzero().tolist() == [[0, 0], [0, 1], [2, 4], [2, 5]]


def test_cuda_graphs_are_refused_off_cuda(tiny_model_dir):
    with pytest.raises(StrategyError, match="CUDA model for decode_graphs=true"):
        HFInferStrategy(tiny_model_dir, strategy_config={"decode": "static", "decode_graphs": True})


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "cuda-graphs"])
def test_static_decoding_on_cuda_samples_as_the_generate_path(folder, toy, graphs, assert_same):
    """float32 on the GPU: the slot decoder, its decode step replayed as a CUDA graph or not, twice (the
    second call replays the graph captured by the first), against HF generate."""
    plain = HFInferStrategy(folder, seed=5, device="cuda", strategy_config={"decode": "generate"})
    config = {"decode": "static", "decode_slots": 3, "decode_graphs": graphs}
    static = HFInferStrategy(folder, seed=5, device="cuda", strategy_config=config)
    prompts = _prompts(plain, toy, 6)
    for params in (GREEDY, SAMPLED):
        keys = list(range(6))
        assert_same(plain.generate(prompts, params, keys), static.generate(prompts, params, keys))
