"""A short rollout through the scheduler (built as conftest's `scheduler_factory` builds it, with room
for longer answers) on two envs of each adapted library (GEM, TextArena,
reasoning-gym), with a character-level tokenizer so that any scripted answer round-trips. Each
library's case skips when its roll-envs extra is not installed."""

from __future__ import annotations

import asyncio
import importlib.util
import string
import warnings

import pytest
from roll_rollout import EnvLayout, EnvSlotSpec, EnvWorker, RolloutScheduler, SamplingSettings, WorkerLink
from roll_rollout.testing import ScriptedPolicy

pytestmark = pytest.mark.adapters

CASES = [
    ("gem:game:Minesweeper-v0-easy", "gem", "\\boxed{reveal 2 2}"),
    ("gem:game:GuessTheNumber-v0-easy", "gem", "\\boxed{5}"),
    ("textarena:TicTacToe-v0", "textarena", "[4]"),
    ("textarena:GuessTheNumber-v0", "textarena", "[5]"),
    ("reasoning_gym:basic_arithmetic", "reasoning_gym", "<answer>3</answer>"),
    ("reasoning_gym:rotate_matrix", "reasoning_gym", "<answer>1 2\n3 4</answer>"),
]


@pytest.fixture(scope="module")
def chat_tokenizer(make_hf_tokenizer):
    """One token per printable character (overrides conftest's word-level one)."""
    from tokenizers import decoders

    return make_hf_tokenizer(list(dict.fromkeys(string.printable)), r"[\s\S]", decoders.Fuse())


@pytest.mark.parametrize(("env_id", "module", "answer"), CASES)
def test_a_short_rollout_runs(chat_tokenizer, env_id, module, answer):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (roll-envs extra)")
    import roll_envs

    def factory(_type, _config):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return roll_envs.make(env_id, max_steps=3)

    ids = chat_tokenizer.encode(answer, add_special_tokens=False)
    assert chat_tokenizer.decode(ids) == answer
    layout = EnvLayout(2, 2, ("A",), (2,), max_env_num_per_worker=4)
    policy = ScriptedPolicy(ids)

    def spawn(w):
        slots = [
            EnvSlotSpec(e, layout.tag_of_group(layout.group_of_env(e)), env_id, max_turns=3)
            for e in layout.env_ids_of_worker(w)
        ]
        return WorkerLink.in_process(EnvWorker(slots, chat_tokenizer, policy, env_factory=factory))

    sampling = {tag: SamplingSettings(max_new_tokens=64) for tag in layout.tags}
    scheduler = RolloutScheduler(layout, spawn, sampling, seed=5)

    async def one_batch():
        try:
            return await scheduler.get_batch(4)
        finally:
            await scheduler.stop()

    trajs = asyncio.run(one_batch()).trajectories
    assert len(trajs) == 4 and not any(t.error for t in trajs)
    for g in {t.group_id for t in trajs}:  # same seed in a group: the same episode
        group = [t for t in trajs if t.group_id == g]
        assert len({tuple(turn.observation for turn in t.turns) for t in group}) == 1
    assert all(t.turns and t.turns[0].action_is_valid and t.turns[0].response_text == answer for t in trajs)
