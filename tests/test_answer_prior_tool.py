"""tools/answer_prior.py: the decision text after a prefix, and its probabilities against sampled answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import answer_prior  # noqa: E402


@pytest.mark.parametrize(
    ("answer", "action", "prefix", "decision"),
    [
        ("<answer>C</answer>", "C", "<answer>", "C"),
        ("<answer>C</answer>", "C", "The answer is <answer>", "C"),  # the prefix ends with the opening tag
        ("<answer>Left</answer>", "Left", "", "<answer>Left"),
        ("<answer>Left</answer>", "Left", "<ans", "wer>Left"),
        ("\\boxed{4}", "4", "<answer>", "\\boxed{4"),  # nothing of the answer in the prefix
    ],
)
def test_the_decision_is_what_follows_the_prefix_up_to_the_action(answer, action, prefix, decision):
    assert answer_prior.decision_text(answer, action, prefix) == decision


def chain_rule_probability(model, prompt: list[int], answer: list[int]) -> float:
    """P(answer | prompt) one token at a time through the KV cache: the reference for the tool's one pass."""
    probability, past, step = 1.0, None, prompt
    with torch.no_grad():
        for token in answer:
            out = model(input_ids=torch.tensor([step]), past_key_values=past, use_cache=True)
            probability *= float(out.logits[0, -1].float().softmax(-1)[token])
            past, step = out.past_key_values, [token]
    return probability


@pytest.mark.parametrize("prefix", ["", "<answer>"])
def test_the_probabilities_are_the_chain_rule_of_the_decision_tokens(prefix):
    from roll_pipeline.assembly.settings import config_model
    from roll_pipeline.cli.args import EXAMPLES_DIR
    from roll_pipeline.config.compose import compose
    from roll_strategies.models._loading import load_model_and_tokenizer

    config = compose(
        str(EXAMPLES_DIR / "tiny-cpu-agentic"),
        "agent_four_choice",
        [f"++custom_envs.FourChoice.response_prefix='{prefix}'"],
    )
    model, tokenizer = load_model_and_tokenizer(config_model(config), device="cpu", dtype="float32")
    priors = answer_prior.probe_tag(model, tokenizer, config.custom_envs["FourChoice"], 40, 10**9)
    assert sorted(p.observation for p in priors) == sorted(
        f"The light is {c}." for c in ("red", "green", "blue", "yellow")
    )
    assert sum(p.episodes for p in priors) == 40
    for prior in priors:
        for action, probability in prior.probabilities.items():
            decision = (prefix and action) or f"<answer>{action}"  # what follows the prompt
            ids = tokenizer.encode(decision, add_special_tokens=False)
            assert len(ids) == (1 if prefix else 2)
            assert probability == pytest.approx(chain_rule_probability(model, prior.prompt, ids), rel=1e-4)
        assert 0.0 < sum(prior.probabilities.values()) <= 1.0 + 1e-6
