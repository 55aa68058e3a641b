"""The builtin tiny models' warm-up data: the default one sees single boards, the history one whole episodes."""

from __future__ import annotations

import dataclasses

from roll_pipeline.models import BUILTIN_MODELS, HISTORY_WINDOW, format_warmup_examples


def _small(name: str):
    return dataclasses.replace(BUILTIN_MODELS[name], warmup_examples=300)


def test_the_default_model_warms_up_on_single_board_prompts():
    spec = _small("tiny-frozen-lake")
    assert spec.sliding_window is None
    for messages, response in format_warmup_examples(spec):
        assert [m["role"] for m in messages] == ["system", "user"]
        assert response.startswith("<answer>") and response.endswith("</answer>")


def test_the_history_model_warms_up_on_whole_episodes_played_so_far():
    spec = _small("tiny-frozen-lake-history")
    assert spec.sliding_window == HISTORY_WINDOW
    examples = format_warmup_examples(spec)
    lengths = {len(messages) for messages, _ in examples}
    assert 2 in lengths and max(lengths) >= 8  # first turns and deep ones
    for messages, _ in examples:
        roles = [m["role"] for m in messages]
        assert roles[0] == "system" and roles[-1] == "user"
        assert roles[1:] == ["user", "assistant"] * ((len(roles) - 2) // 2) + ["user"]
        # the earlier turns are the episode's own: each assistant turn is an answer
        assert all(m["content"].startswith("<answer>") for m in messages if m["role"] == "assistant")
