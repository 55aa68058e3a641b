"""hf_infer: stop strings of any length, and log-probs kept without the [batch, new tokens, vocab] logits.

References are independent of the code under test: a decode-every-prefix loop for where a row must stop,
the pre-change full-logits computation and a teacher-forced forward for the log-probs.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from roll_strategies import GenerationOutput, GenerationParams, HFInferStrategy, StrategyError
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.infer.hf_infer import SampledLogProbs, StopStrings
from roll_strategies.infer.sampling import KeyedSampler, row_keys
from roll_strategies.models.gguf import GGUF_INFO_FILE, SMOLLM2_GGUF, default_cache_dir
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedTokenizerFast

KEYS = list(range(100, 108))


@pytest.fixture(scope="module")
def infer(tiny_model_dir) -> HFInferStrategy:
    return HFInferStrategy(tiny_model_dir, seed=3)


def _prompts(tokenizer, toy, n: int) -> list[list[int]]:
    rng = random.Random(11)
    texts = [
        tokenizer.apply_chat_template(
            toy.chat(toy.grid_observation(rng, 2 + i % 3)), add_generation_prompt=True, tokenize=False
        )
        for i in range(n)
    ]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


def _text(tokenizer, ids: Sequence[int]) -> str:
    """The text a row's ids stand for: special tokens kept, no clean-up (what stop strings are matched in)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _reference_end(
    tokenizer, ids: Sequence[int], stop_strings: Sequence[str], stop_ids: set[int]
) -> int | None:
    """Slow reference: the first k such that ids[k-1] is a stop id or decode(ids[:k]) contains a stop string."""
    for k in range(1, len(ids) + 1):
        if ids[k - 1] in stop_ids or any(s in _text(tokenizer, ids[:k]) for s in stop_strings):
            return k
    return None


def _teacher_forced(model, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / temperature)[id] of each output id, from one forward over prompt + output."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0].tolist()


def _old_generate(infer: HFInferStrategy, prompts, params: GenerationParams, keys) -> list[GenerationOutput]:
    """The pre-change hf_infer: every step's raw logits kept ([B, N, V]), log-probs gathered after generate."""
    input_ids, mask = infer._pad_left(prompts)
    stop_ids = [int(infer.tokenizer.eos_token_id)]
    sampler = KeyedSampler(row_keys(infer.seed, 0, len(prompts), keys), **_warp(params))
    config = GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        do_sample=False,
        eos_token_id=stop_ids,
        pad_token_id=int(infer.tokenizer.pad_token_id),
        output_logits=True,
        return_dict_in_generate=True,
    )
    with torch.no_grad():
        out = infer.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            generation_config=config,
            logits_processor=LogitsProcessorList([] if params.greedy else [sampler]),
        )
    new_ids = out.sequences[:, input_ids.shape[1] :]
    temperature = 1.0 if params.greedy else params.temperature
    logits = torch.stack(out.logits, dim=1).float()
    lps = torch.log_softmax(logits / temperature, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
    outs = []
    for ids, lp in zip(new_ids.tolist(), lps.tolist(), strict=True):
        end = next((i + 1 for i, t in enumerate(ids) if t in stop_ids), None)
        outs.append(GenerationOutput(ids[:end], lp[:end], "stop" if end else "length"))
    return outs


def _warp(params: GenerationParams) -> dict[str, float | int]:
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p}


def _stop_strings_from(tokenizer, outputs: Sequence[GenerationOutput], rows: Sequence[int]) -> list[str]:
    """For each given row, a printable piece of its sampled text that spans 2+ tokens and starts and ends
    inside a token (both ends overhang), taken from the middle of the row."""
    picked = []
    for row in rows:
        ids = outputs[row].output_ids
        for i in range(len(ids) // 3, len(ids) - 3):
            piece = _text(tokenizer, ids[i : i + 3])
            if piece.isascii() and piece.isprintable() and len(piece) >= 5:
                picked.append(piece[1:-1])
                break
    return picked


@pytest.mark.parametrize(
    "params",
    [
        GenerationParams(max_new_tokens=24),
        GenerationParams(max_new_tokens=24, temperature=0.7, top_k=40, top_p=0.9),
    ],
    ids=["t1", "t0.7-topk-topp"],
)
def test_multi_token_stop_strings_end_each_row_at_its_first_match(infer, toy, params):
    prompts = _prompts(infer.tokenizer, toy, len(KEYS))
    free = infer.generate(prompts, params, KEYS)
    stops = _stop_strings_from(infer.tokenizer, free, rows=[0, 3, 5])
    assert len(stops) == 3 and all(
        len(infer.tokenizer.encode(s, add_special_tokens=False)) >= 2 for s in stops
    )
    stopped = infer.generate(prompts, dataclasses.replace(params, stop_strings=tuple(stops)), KEYS)

    eos = {int(infer.tokenizer.eos_token_id)}
    ends = []
    for prompt, full, out in zip(prompts, free, stopped, strict=True):
        end = _reference_end(infer.tokenizer, full.output_ids, stops, eos)
        ends.append(end)
        # Keyed sampling: the same tokens as without stop strings, cut exactly where the text first holds one.
        assert out.output_ids == full.output_ids[: end or len(full.output_ids)]
        assert out.finish_reason == ("stop" if end else full.finish_reason)
        assert len(out.log_probs) == len(out.output_ids)
        np.testing.assert_allclose(out.log_probs, full.log_probs[: len(out.output_ids)], atol=1e-5)
        np.testing.assert_allclose(
            out.log_probs, _teacher_forced(infer.model, prompt, out.output_ids, params.temperature), atol=1e-4
        )
    assert sum(e is not None and e < len(f.output_ids) for e, f in zip(ends, free, strict=True)) >= 3
    assert any(e is None for e in ends)  # rows that never write a stop string run to the budget


def test_log_probs_equal_the_full_logits_computation_and_teacher_forcing(infer, toy):
    prompts = _prompts(infer.tokenizer, toy, 4)
    for params in (
        GenerationParams(max_new_tokens=16, temperature=1.3, top_k=50),
        GenerationParams(max_new_tokens=16, greedy=True),
    ):
        new = infer.generate(prompts, params, KEYS[:4])
        old = _old_generate(infer, prompts, params, KEYS[:4])
        temperature = 1.0 if params.greedy else params.temperature
        for prompt, a, b in zip(prompts, new, old, strict=True):
            assert a.output_ids == b.output_ids and a.finish_reason == b.finish_reason
            np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-6)
            np.testing.assert_allclose(
                a.log_probs, _teacher_forced(infer.model, prompt, a.output_ids, temperature), atol=1e-4
            )
    # temperature 1: the training side's scorer (`batched_log_probs`) gives the same numbers
    out = infer.generate(prompts[:1], GenerationParams(max_new_tokens=12), [7])[0]
    ids = torch.tensor([prompts[0] + out.output_ids])
    scored = batched_log_probs(
        infer.model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 1, device="cpu"
    )
    np.testing.assert_allclose(scored[0, len(prompts[0]) :].numpy(), out.log_probs, atol=1e-4)


def test_generate_asks_for_no_logits_or_scores(infer, toy, monkeypatch):
    seen = {}
    real = infer.model.generate

    def spy(*args, **kwargs):
        seen["config"] = kwargs["generation_config"]
        seen["processors"] = list(kwargs["logits_processor"])
        out = real(*args, **kwargs)
        seen["out"] = out
        return out

    monkeypatch.setattr(infer.model, "generate", spy)
    infer.generate(
        _prompts(infer.tokenizer, toy, 2), GenerationParams(max_new_tokens=6, stop_strings=("ab",))
    )
    assert seen["config"].output_logits is False and seen["config"].output_scores is False
    assert getattr(seen["out"], "logits", None) is None and getattr(seen["out"], "scores", None) is None
    assert isinstance(seen["processors"][0], SampledLogProbs)  # first: it must see the raw logits


def test_sampled_log_probs_holds_one_step_of_log_probs():
    recorder = SampledLogProbs(temperature=2.0)
    rng = torch.Generator().manual_seed(0)
    steps = [torch.randn(3, 11, generator=rng) for _ in range(4)]
    ids = torch.randint(0, 11, (3, 4), generator=rng)
    for t, scores in enumerate(steps):
        recorder(torch.cat([torch.zeros(3, 2, dtype=torch.long), ids[:, :t]], dim=1), scores)
        assert len(recorder._steps) == t  # only the pending step is a [B, V] tensor
    expected = torch.stack([torch.log_softmax(s / 2.0, -1) for s in steps], 1).gather(-1, ids[..., None])[
        ..., 0
    ]
    torch.testing.assert_close(recorder.finish(ids), expected)
    with pytest.raises(StrategyError, match="logits_processor"):
        SampledLogProbs(1.0).finish(ids)


def test_single_token_stop_string_still_stops(warm_model_dir, toy):
    """The warmed model writes "<answer>Dir</answer><|im_end|>": "</answer>" (one token here) now ends it."""
    strategy = HFInferStrategy(warm_model_dir)
    tag = strategy.tokenizer.convert_tokens_to_ids("</answer>")
    prompts = _prompts(strategy.tokenizer, toy, 4)
    outs = strategy.generate(prompts, GenerationParams(max_new_tokens=10, stop_strings=("</answer>",)))
    for out in outs:
        assert out.finish_reason == "stop" and out.output_ids[-1] == tag
        assert tag not in out.output_ids[:-1] and len(out.log_probs) == len(out.output_ids)


def test_generation_params_refuse_empty_or_bare_stop_strings():
    with pytest.raises(StrategyError, match="empty string"):
        GenerationParams(max_new_tokens=4, stop_strings=("</answer>", ""))
    with pytest.raises(StrategyError, match="wrapped"):
        GenerationParams(max_new_tokens=4, stop_strings="</answer>")  # type: ignore[arg-type]
    assert GenerationParams(max_new_tokens=4, stop_strings=["a"]).stop_strings == ("a",)  # type: ignore[arg-type]


# ----------------------------------------------------------- tokenizers where "</answer>" is several tokens
def _bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on text without "</answer>", so the tag is split into pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["an answer to the question is Left.", "</ >. answers <a> or <b>", "Right Up Down"] * 20
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def _smollm2_tokenizer():
    """SmolLM2's tokenizer when tools/convert_gguf.py --fetch-smollm2 has converted it, else None."""
    from transformers import AutoTokenizer

    for info in sorted(Path(default_cache_dir()).glob(f"*/{GGUF_INFO_FILE}")):
        if Path(json.loads(info.read_text())["source"]).name == SMOLLM2_GGUF:
            return AutoTokenizer.from_pretrained(info.parent, local_files_only=True)
    return None


def _run_criterion(tokenizer, rows: list[list[int]], prompt_width: int, stops, stop_ids) -> list[int | None]:
    """Feed `StopStrings` the rows step by step as `generate` would (prompt columns first), finished rows
    padded; return its ends."""
    criterion = StopStrings(tokenizer, stops, (len(rows), prompt_width), stop_ids)
    width = max(len(r) for r in rows)
    pad = 0  # what fills finished rows does not matter: they are not decoded again
    for step in range(1, width + 1):
        batch = [[pad] * prompt_width + (r[:step] + [pad] * step)[:step] for r in rows]
        done = criterion(torch.tensor(batch), torch.zeros(len(rows), 1))
        assert done.tolist() == [e is not None for e in criterion.ends]
    return criterion.ends


@pytest.mark.parametrize("which", ["bpe", "smollm2"])
def test_stop_string_of_several_tokens_ends_at_the_completing_token(which):
    tokenizer = _bpe_tokenizer() if which == "bpe" else _smollm2_tokenizer()
    if tokenizer is None:
        pytest.skip("SmolLM2 not converted (uv run python tools/convert_gguf.py --fetch-smollm2)")
    assert len(tokenizer.encode("</answer>", add_special_tokens=False)) >= 3
    texts = [
        "<answer>Left</answer> and more text after it",
        "thinking... </answer>. trailing",  # ">." may be one token: the stop string overhangs its end
        "no tag here at all, only words and words",
        "<answer>Up</ans wer> </answ",  # near misses never stop
        " </answer></answer>",  # the first occurrence wins
    ]
    rows = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    eos = int(tokenizer.eos_token_id)
    rows[2] = [*rows[2][:5], eos, *rows[2][5:]]  # a stop id ends a row too (recorded by id, not by text)
    ends = _run_criterion(tokenizer, rows, prompt_width=3, stops=("</answer>",), stop_ids=[eos])
    for row, end in zip(rows, ends, strict=True):
        reference = _reference_end(tokenizer, row, ["</answer>"], set())
        assert end == reference, (tokenizer.convert_ids_to_tokens(row), end, reference)
        if end is not None:
            assert "</answer>" in _text(tokenizer, row[:end]) and "</answer>" not in _text(
                tokenizer, row[: end - 1]
            )
    assert [e is not None for e in ends] == [True, True, False, False, True]
