"""Stop strings: turned into token ids once, refused with a clear error when they are not one token."""

from __future__ import annotations

import pytest
from roll_pipeline.runtime.policy_server import stop_token_ids
from roll_strategies.tiny_tokenizer import build_tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer(["Move Left or Right"])


def test_stop_strings_become_ids_after_eos(tokenizer):
    tag = tokenizer.convert_tokens_to_ids("</answer>")
    assert stop_token_ids(tokenizer, ["</answer>"]) == (tokenizer.eos_token_id, tag)
    assert stop_token_ids(tokenizer, []) == (tokenizer.eos_token_id,)
    assert tokenizer.decode([tag]) == "</answer>"


def test_multi_token_stop_string_is_refused(tokenizer):
    with pytest.raises(ValueError, match="one token"):
        stop_token_ids(tokenizer, ["Left Right"])
