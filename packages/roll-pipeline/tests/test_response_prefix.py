"""`custom_envs.TAG.response_prefix`: reaches every env slot of its tag, and a chat endpoint refuses it."""

from __future__ import annotations

import argparse

import pytest
from roll_pipeline import tiny_config
from roll_pipeline.assembly.settings import rollout_settings
from roll_pipeline.cli.play import _openai_policy
from roll_pipeline.runtime.rollout import layout_of, slots_of


def prefixed_config():
    return tiny_config(
        custom_envs={
            "FrozenLake": {"response_prefix": "<answer>"},
            "Plain": {"env_type": "frozen_lake"},
        },
        train_env_manager={"num_env_groups": 2, "group_size": 2, "tags": ["FrozenLake", "Plain"]},
    )


def test_every_slot_of_a_tag_gets_its_prefix_and_other_tags_none():
    config = prefixed_config()
    settings, layout = rollout_settings(config), layout_of(config.train_env_manager)
    slots = [s for w in range(layout.num_workers) for s in slots_of(settings, layout, w)]
    assert {(s.tag, s.response_prefix) for s in slots} == {("FrozenLake", "<answer>"), ("Plain", "")}


def test_a_chat_endpoint_refuses_a_prefix_before_any_episode():
    args = argparse.Namespace(
        openai_base_url="http://127.0.0.1:1/v1", checkpoint=None, openai_endpoint="chat"
    )
    with pytest.raises(ValueError, match=r"\['FrozenLake'\] set response_prefix.*completions"):
        _openai_policy(args, None, prefixed_config())
