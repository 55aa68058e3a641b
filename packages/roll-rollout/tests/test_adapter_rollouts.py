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

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CASES = [
    ("gem:game:Minesweeper-v0-easy", "gem", "\\boxed{reveal 2 2}"),
    ("gem:game:GuessTheNumber-v0-easy", "gem", "\\boxed{5}"),
    ("textarena:TicTacToe-v0", "textarena", "[4]"),
    ("textarena:GuessTheNumber-v0", "textarena", "[5]"),
    ("reasoning_gym:basic_arithmetic", "reasoning_gym", "<answer>3</answer>"),
    ("reasoning_gym:rotate_matrix", "reasoning_gym", "<answer>1 2\n3 4</answer>"),
]


@pytest.fixture(scope="module")
def chat_tokenizer():
    """One token per printable character (overrides conftest's word-level one)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<unk>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(dict.fromkeys(string.printable)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )


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
