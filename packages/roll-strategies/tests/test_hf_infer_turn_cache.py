"""hf_infer's kept turns (`TurnCache`): an episode's next turn encodes only the ids its prompt adds, and gives
the plain path's tokens and log-probs (to 1e-5) on Qwen2- and Llama-shaped models; new weights forget the
kept sequences; the cache's lookup and budget against slow references."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from forward_helpers import SHAPE
from roll_strategies import GenerationOutput, GenerationParams, HFInferStrategy, StrategyError
from roll_strategies.infer import prompt_cache
from roll_strategies.infer.turn_cache import (
    KeptSequence,
    TurnCache,
    full_attention_cache,
    prefix_fingerprints,
)
from roll_strategies.sync.weights import unique_named_tensors
from transformers import DynamicCache, Qwen2Config

SAMPLED = GenerationParams(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=20)
GREEDY = GenerationParams(max_new_tokens=12, greedy=True)


@pytest.fixture(params=["qwen2", "llama"])
def pair(request, tiny_model_dir, llama_model_dir) -> tuple[HFInferStrategy, HFInferStrategy]:
    """(plain, shared) strategies on one model, same seed, fresh for each test (the cache is state)."""
    folder = tiny_model_dir if request.param == "qwen2" else llama_model_dir
    return HFInferStrategy(folder, seed=5), HFInferStrategy(folder, seed=5, share_prefix=True)


def _encode(strategy: HFInferStrategy, text: str) -> list[int]:
    return strategy.tokenizer.encode(text, add_special_tokens=False)


def _first_prompts(strategy: HFInferStrategy, toy, n: int) -> list[list[int]]:
    rng = random.Random(3)
    return [
        _encode(
            strategy,
            strategy.tokenizer.apply_chat_template(
                toy.chat(toy.grid_observation(rng, 3)), add_generation_prompt=True, tokenize=False
            ),
        )
        for _ in range(n)
    ]


def _glue(strategy: HFInferStrategy, toy, rng: random.Random) -> list[int]:
    """What a next turn appends after the sampled ids: end of turn, a new observation, the assistant header."""
    return _encode(
        strategy, f"\n<|im_start|>user\n{toy.grid_observation(rng, 3)}<|im_end|>\n<|im_start|>assistant\n"
    )


def _prefill_shapes(strategy, prompts, params, keys) -> tuple[list[GenerationOutput], list[tuple[int, ...]]]:
    """A `generate` call's outputs and the [rows, columns] of each forward it ran."""
    shapes: list[tuple[int, ...]] = []
    hook = strategy.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: shapes.append(tuple(args[0].shape))
    )
    try:
        return strategy.generate(prompts, params, keys), shapes
    finally:
        hook.remove()


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "t1-topp-topk"])
def test_next_turns_encode_only_their_new_ids_and_sample_as_the_plain_path(pair, toy, params, assert_same):
    plain, shared = pair
    rng = random.Random(9)
    prompts = _first_prompts(plain, toy, 4)
    glues: list[list[int]] = []  # what the last turn's prompts appended
    for turn in range(3):
        keys = [100 * turn + episode for episode in range(len(prompts))]
        expected = plain.generate(prompts, params, keys)
        got, shapes = _prefill_shapes(shared, prompts, params, keys)
        assert_same(expected, got)
        if (
            glues
        ):  # one forward over the 4 prompts' new ids (all but the last), then one token per row and step
            assert shapes[0] == (4, max(len(g) for g in glues)), shapes
            assert all(columns == 1 for _, columns in shapes[1:])
        # the next prompt extends this one token for token, as `PromptBuilder` builds it
        glues = [_glue(plain, toy, rng) for _ in prompts]
        prompts = [p + o.output_ids + g for p, o, g in zip(prompts, expected, glues, strict=True)]
    assert len(shared.turns) == 4  # each turn's sequence replaced the one it extended


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "t1-topp-topk"])
def test_new_episodes_beside_next_turns_are_encoded_apart(pair, toy, params, assert_same):
    """A batch of next turns and new episodes, as the async scheduler mixes them: the new episodes' prompts are
    encoded in a forward of their own, so the batch's forward covers only the next turns' new ids instead of
    every row as wide as a whole new prompt; tokens and log-probs are the plain path's."""
    plain, shared = pair
    rng = random.Random(4)
    first = _first_prompts(plain, toy, 5)
    old, new = first[:3], first[3:]
    outputs = plain.generate(old, params, [1, 2, 3])
    assert_same(outputs, shared.generate(old, params, [1, 2, 3]))
    glues = [_glue(plain, toy, rng) for _ in old]
    batch = [p + o.output_ids + g for p, o, g in zip(old, outputs, glues, strict=True)] + new
    keys = [11, 12, 13, 14, 15]
    got, shapes = _prefill_shapes(shared, batch, params, keys)
    assert_same(plain.generate(batch, params, keys), got)
    # the new prompts' system turn once in one row, their rests in 2 rows; then the batch's new ids; then a
    # token per row and step
    assert shapes[0][0] == 1 and shapes[1][0] == 2 and shapes[1][1] < len(new[0]), shapes
    assert shapes[2] == (5, max(len(g) for g in glues)), shapes
    assert all(shape == (5, 1) for shape in shapes[3:]), shapes
    assert len(shared.turns) == 5  # the next turns replaced what they extended; the new episodes were added


def test_a_moved_history_window_reuses_nothing_kept(pair, toy, assert_same):
    """A prompt that starts anew (a history window moved on) shares only the system turn with what was kept:
    a partial match, which depends on what other episodes ran before, is not used; the batch's shared prefix
    still runs once, and the tokens are the plain path's."""
    plain, shared = pair
    first = _first_prompts(plain, toy, 3)
    assert_same(plain.generate(first, SAMPLED, [1, 2, 3]), shared.generate(first, SAMPLED, [1, 2, 3]))
    moved = _first_prompts(plain, toy, 6)[3:]  # new observations: only the chat template's start is common
    common = _slow_common_start(moved[0], first[0])
    assert prompt_cache.MIN_SHARED_TOKENS <= common < len(first[0])
    assert shared.turns.match(moved[0]) == (None, 0)
    assert all(kept is None for kept, _ in shared.prompt_cache.heads(moved))
    assert_same(plain.generate(moved, SAMPLED, [4, 5, 6]), shared.generate(moved, SAMPLED, [4, 5, 6]))


def test_loaded_weights_forget_the_kept_turns(pair, toy, assert_same):
    plain, shared = pair
    prompts = _first_prompts(plain, toy, 2)
    outputs = shared.generate(prompts, GREEDY, [1, 2])
    assert len(shared.turns) == 2
    new = {name: tensor.detach() * 1.5 for name, tensor in unique_named_tensors(plain.model).items()}
    plain.update_weights(new, version=1)
    shared.update_weights(new, version=1)
    assert len(shared.turns) == 0 and shared.turns.nbytes == 0
    following = [p + o.output_ids + [5, 6, 7] for p, o in zip(prompts, outputs, strict=True)]
    assert_same(plain.generate(following, GREEDY, [3, 4]), shared.generate(following, GREEDY, [3, 4]))


def test_no_turns_are_kept_without_share_prefix_or_budget(tiny_model_dir, toy):
    for strategy in (
        HFInferStrategy(tiny_model_dir),
        HFInferStrategy(tiny_model_dir, share_prefix=True, turn_cache_bytes=0),
    ):
        strategy.generate(_first_prompts(strategy, toy, 2), GREEDY)
        assert len(strategy.turns) == 0
    with pytest.raises(StrategyError, match="turn_cache_bytes >= 0"):
        HFInferStrategy(tiny_model_dir, share_prefix=True, turn_cache_bytes=-1)


def test_windowed_attention_keeps_no_turns():
    windowed = Qwen2Config(**SHAPE, use_sliding_window=True, sliding_window=16, max_window_layers=1)
    full = Qwen2Config(**SHAPE)
    assert not full_attention_cache(DynamicCache(config=windowed))
    assert full_attention_cache(DynamicCache(config=full))


# ----------------------------------------------------------------------------------- the cache on its own
def _sequence(ids: list[int], width: int = 2) -> KeptSequence:
    """A kept sequence of `ids` with one layer of [1, len, width] float32 keys and values (8 * len * width B)."""
    return KeptSequence(
        np.asarray(ids, dtype=np.int64), [(torch.zeros(1, len(ids), width), torch.zeros(1, len(ids), width))]
    )


def _slow_common_start(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def test_match_finds_the_longest_kept_sequence_the_prompt_starts_with():
    """Against a brute-force scan of the kept sequences; short ids over 3 values make many sequences share
    starts, repeat one another and be prefixes of one another."""
    rng = random.Random(0)
    for _ in range(300):
        kept = [[rng.randrange(3) for _ in range(rng.randrange(1, 12))] for _ in range(rng.randrange(1, 9))]
        cache = TurnCache(1 << 20)
        sequences = [_sequence(ids) for ids in kept]
        for sequence in sequences:
            cache.keep(sequence)
        prompt = [rng.randrange(3) for _ in range(rng.randrange(1, 14))]
        # a prompt's last id is never matched: generate runs it itself
        starts = [len(ids) if len(ids) < len(prompt) and prompt[: len(ids)] == ids else 0 for ids in kept]
        best, length = cache.match(prompt)
        assert length == max(starts)
        assert (best is None) == (length == 0)
        if best is not None:
            assert best.ids.tolist() == prompt[:length]
            # of sequences with the same ids, the last kept one stands for them
            assert best is sequences[max(i for i, ids in enumerate(kept) if ids == prompt[:length])]
        distinct = {tuple(ids) for ids in kept}
        assert len(cache) == len(distinct) and cache.nbytes == sum(16 * len(ids) for ids in distinct)


def test_fingerprints_equal_exactly_for_equal_prefixes():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50_000, size=3000)
    prints = prefix_fingerprints(ids)
    assert prints.dtype == np.uint64 and len(set(prints.tolist())) == len(ids)  # no two prefixes collide here
    assert np.array_equal(prefix_fingerprints(ids[:700]), prints[:700])
    changed = ids.copy()
    changed[500] += 1
    assert np.array_equal(prefix_fingerprints(changed)[:500], prints[:500])
    assert not np.any(prefix_fingerprints(changed)[500:] == prints[500:])
    assert (
        prefix_fingerprints(np.zeros(2, dtype=np.int64))[0]
        != prefix_fingerprints(np.zeros(2, dtype=np.int64))[1]
    )


def test_the_budget_evicts_the_least_recently_used():
    one = 8 * 4 * 2  # a 4-id sequence's keys and values
    cache = TurnCache(3 * one + 16)  # room for three 4-id sequences, or two and a 5-id one
    a, b, c, d = (_sequence([k, k, k, k]) for k in range(4))
    for sequence in (a, b, c):
        cache.keep(sequence)
    assert cache.nbytes == 3 * one
    assert cache.match([0, 0, 0, 0, 9]) == (a, 4)  # a used: b is now the least recent
    cache.keep(d)
    assert len(cache) == 3 and cache.match([1, 1, 1, 9]) == (None, 0)
    cache.keep(_sequence(list(range(20))))  # larger than the whole budget: not kept, nothing evicted
    assert len(cache) == 3 and cache.nbytes == 3 * one
    extension = _sequence([3, 3, 3, 3, 5])
    cache.keep(extension, replaces=d)
    assert cache.match([3, 3, 3, 3, 5, 6]) == (extension, 5) and len(cache) == 3
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        TurnCache(-1)


def test_forget_turns_drops_what_was_kept(tiny_model_dir, toy):
    """What the pipeline calls after a validation pass: its episodes are no training turn's history."""
    shared = HFInferStrategy(tiny_model_dir, share_prefix=True)
    shared.generate(_first_prompts(shared, toy, 2), GREEDY)
    assert len(shared.turns) == 2
    shared.forget_turns()
    assert len(shared.turns) == 0 and shared.turns.nbytes == 0
