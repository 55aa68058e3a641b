"""hf_infer with `share_prefix=True`: each distinct prompt is encoded once, and generation gives the plain path's
tokens, finish reasons and log-probs (to 1e-5) on Qwen2- and Llama-shaped models, greedy and sampled, with
stop strings."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest
import torch
from roll_strategies import (
    GenerationOutput,
    GenerationParams,
    HFInferStrategy,
    StrategyError,
    build_tiny_model,
)
from roll_strategies.infer import hf_infer, prompt_cache

SAMPLED = GenerationParams(max_new_tokens=16, temperature=1.0, top_p=0.9, top_k=20)
GREEDY = GenerationParams(max_new_tokens=16, greedy=True)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def pair(request, tiny_model_dir, llama_model_dir) -> tuple[HFInferStrategy, HFInferStrategy]:
    """(plain, shared) strategies on one model, same seed."""
    folder = tiny_model_dir if request.param == "qwen2" else llama_model_dir
    return HFInferStrategy(folder, seed=3), HFInferStrategy(folder, seed=3, share_prefix=True)


def _grouped_prompts(tokenizer, toy) -> list[list[int]]:
    """Groups of 4 samples of 2 distinct prompts of different lengths, interleaved."""
    rng = random.Random(7)
    short, long = (
        tokenizer.encode(
            tokenizer.apply_chat_template(
                toy.chat(toy.grid_observation(rng, size)), add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for size in (2, 4)
    )
    assert len(long) > len(short)
    return [long, short, short, long, long, short, short, long]


def _stop_strings_from(tokenizer, outputs: Sequence[GenerationOutput]) -> tuple[str, ...]:
    """From a few rows, the text of two adjacent tokens past the row's start (whole characters): stop
    strings that end those rows, or others earlier."""
    stops = set()
    for out in outputs[::3]:
        ids = out.output_ids
        for i in range(len(ids) // 3, len(ids) - 1):
            piece = tokenizer.decode(ids[i : i + 2], skip_special_tokens=False)
            if len(piece) >= 2 and "\ufffd" not in piece:
                stops.add(piece)
                break
    return tuple(sorted(stops))


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "t1-topp-topk"])
def test_shared_prompts_give_the_plain_tokens_and_log_probs(pair, toy, params, assert_same):
    plain, shared = pair
    prompts = _grouped_prompts(plain.tokenizer, toy)
    keys = list(range(20, 28))
    first = plain.generate(prompts, params, keys)
    assert_same(first, shared.generate(prompts, params, keys))
    stops = _stop_strings_from(plain.tokenizer, first)
    assert stops
    with_stops = dataclasses.replace(params, stop_strings=stops)
    ended = plain.generate(prompts, with_stops, keys)
    assert any(len(e.output_ids) < len(f.output_ids) for e, f in zip(ended, first, strict=True))
    assert_same(ended, shared.generate(prompts, with_stops, keys))


def test_unkeyed_rows_sample_as_the_plain_path(pair, toy, assert_same):
    """Rows without sample keys are keyed by (seed, call, row): repeated prompts still sample apart."""
    plain, shared = pair
    prompts = _grouped_prompts(plain.tokenizer, toy)
    a, b = plain.generate(prompts, SAMPLED), shared.generate(prompts, SAMPLED)
    assert_same(a, b)
    assert len({tuple(o.output_ids) for o in b}) > 2


def _forward_shapes(strategy: HFInferStrategy, prompts: list[list[int]]) -> list[tuple[int, ...]]:
    """The [rows, columns] of every forward of one 3-token greedy `generate` call."""
    shapes: list[tuple[int, ...]] = []
    hook = strategy.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: shapes.append(tuple(args[0].shape))
    )
    try:
        strategy.generate(prompts, GenerationParams(max_new_tokens=3, greedy=True))
    finally:
        hook.remove()
    return shapes


def _shared_length(prompts: list[list[int]]) -> int:
    """The ids every prompt starts with (a slow reference: column by column)."""
    n = 0
    while all(len(p) > n + 1 for p in prompts) and len({p[n] for p in prompts}) == 1:
        n += 1
    return n


def test_each_distinct_prompt_is_encoded_once(tiny_model_dir, toy):
    shared = HFInferStrategy(tiny_model_dir, seed=3, share_prefix=True)
    prompts = _grouped_prompts(shared.tokenizer, toy)
    width, common = max(len(p) for p in prompts), _shared_length(prompts)
    assert common >= prompt_cache.MIN_SHARED_TOKENS  # the chat template's system turn
    # the common prefix in one row, the 2 distinct prompts' rests (all but the last column), then one token
    # per row and step
    assert _forward_shapes(shared, prompts) == [(1, common), (2, width - 1 - common), (8, 1), (8, 1), (8, 1)]


def test_distinct_prompts_share_their_common_prefix(pair, toy, assert_same):
    plain, shared = pair
    rng = random.Random(11)
    prompts = [
        plain.tokenizer.encode(
            plain.tokenizer.apply_chat_template(
                toy.chat(toy.grid_observation(rng, size)), add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for size in (2, 3, 4, 3, 2)
    ]
    assert len({tuple(p) for p in prompts}) == len(prompts)  # no prompt repeats
    for params in (GREEDY, SAMPLED):
        assert_same(
            plain.generate(prompts, params, list(range(5))), shared.generate(prompts, params, list(range(5)))
        )
    width, common = max(len(p) for p in prompts), _shared_length(prompts)
    shared.turns.clear()  # else the calls above left these prompts' sequences to reuse
    assert _forward_shapes(shared, prompts)[:2] == [(1, common), (5, width - 1 - common)]


def test_a_short_common_prefix_is_not_shared(tiny_model_dir):
    shared = HFInferStrategy(tiny_model_dir, seed=3, share_prefix=True)
    prompts = [[5, 6, 7, 8, 9, 10, 11, 20, 21], [5, 6, 7, 8, 9, 10, 11, 30]]  # 7 ids in common
    assert prompt_cache.common_prefix_length(prompts) == 0
    assert _forward_shapes(shared, prompts)[0] == (2, 9)  # the plain prefill
    assert prompt_cache.common_prefix_length([[*range(5, 13), 1], [*range(5, 13), 2]]) == 8
    assert prompt_cache.common_prefix_length([[*range(5, 13)], [*range(5, 13)]]) == 0  # never a whole prompt


def test_distinct_prompts_take_the_plain_path(tiny_model_dir, toy):
    shared = HFInferStrategy(tiny_model_dir, seed=3, share_prefix=True)
    prompts = _grouped_prompts(shared.tokenizer, toy)[:2]
    assert shared.prompt_cache.build(prompts, [(None, 0)] * 2) is None  # no head, no repeated prompt
    assert (
        shared.prompt_cache.build([[5], [5]], [(None, 0)] * 2) is None
    )  # one-token prompts: nothing to share


def test_log_probs_are_scored_as_prefix_trees_with_the_plain_values(pair, toy):
    plain, shared = pair
    _assert_same_scores(plain, shared, _grouped_prompts(plain.tokenizer, toy))


def test_a_sliding_window_model_generates_and_scores_as_the_plain_path(tmp_path_factory, toy, assert_same):
    """Every layer slides over 8 tokens, the prompts are longer: cache rows shared for repeated prompts (no
    kept heads: a windowed cache drops positions) and the scoring trees (windowed masks) change nothing."""
    folder = build_tiny_model(
        tmp_path_factory.mktemp("windowed") / "model", vocab_texts=[toy.SYSTEM], sliding_window=8
    )
    plain, shared = HFInferStrategy(folder, seed=3), HFInferStrategy(folder, seed=3, share_prefix=True)
    prompts = _grouped_prompts(plain.tokenizer, toy)
    assert min(map(len, prompts)) > 8
    keys = list(range(20, 28))
    assert_same(plain.generate(prompts, SAMPLED, keys), shared.generate(prompts, SAMPLED, keys))
    _assert_same_scores(plain, shared, prompts)


def _assert_same_scores(plain: HFInferStrategy, shared: HFInferStrategy, prompts: list[list[int]]) -> None:
    """`compute_log_probs` of sampled rows, plain against prefix trees, with and without a response mask."""
    outs = plain.generate(prompts, SAMPLED, list(range(8)))
    rows = [p + o.output_ids for p, o in zip(prompts, outs, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    response = torch.zeros_like(ids, dtype=torch.bool)
    for b, (row, prompt) in enumerate(zip(rows, prompts, strict=True)):  # right padding
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
        response[b, len(prompt) : len(row)] = True
    for batch in (
        {"input_ids": ids, "attention_mask": mask},
        {"input_ids": ids, "attention_mask": mask, "response_mask": response},
    ):
        expected = plain.compute_log_probs(batch, 4)
        got = shared.compute_log_probs(batch, 4)
        assert torch.equal(got != 0, expected != 0)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_a_model_without_exact_prefix_trees_is_refused(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(hf_infer, "prefix_sharing_supported", lambda model, value_model=False: False)
    with pytest.raises(StrategyError, match="share_prefix=false"):
        HFInferStrategy(tiny_model_dir, share_prefix=True)
