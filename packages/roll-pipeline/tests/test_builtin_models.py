"""The builtin tiny models' warm-up data: the default one sees single boards, the history one whole episodes,
the Sokoban one rooms, the multi-env one episodes of FrozenLake and Sokoban in turn."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from roll_envs.envs.frozen_lake import frozen_lake_neighbours
from roll_pipeline.models.recipes import BUILTIN_MODELS, HISTORY_WINDOW, TINY_FROZEN_LAKE_INSTRUCTION
from roll_pipeline.models.warmup import NEIGHBOUR_QUESTION, format_warmup_examples, perception_warmup_examples

SOKOBAN_SYMBOLS = set("#_O√XPS\n")


def _small(name: str):
    return dataclasses.replace(BUILTIN_MODELS[name], warmup_examples=300)


def test_the_default_model_warms_up_on_single_board_prompts():
    spec = _small("tiny-frozen-lake")
    assert spec.sliding_window is None and (spec.num_heads, spec.num_kv_heads) == (8, 4)
    for messages, response in format_warmup_examples(spec):
        assert [m["role"] for m in messages] == ["user"]  # the board alone: no instruction
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
        assert messages[0]["content"] == TINY_FROZEN_LAKE_INSTRUCTION
        assert roles[1:] == ["user", "assistant"] * ((len(roles) - 2) // 2) + ["user"]
        # the earlier turns are the episode's own: each assistant turn is an answer
        assert all(m["content"].startswith("<answer>") for m in messages if m["role"] == "assistant")


@pytest.mark.parametrize(
    ("name", "revision", "digest"),
    [
        ("tiny-frozen-lake", 4, "8c2761fcf725aa409041e624fb451e46f23b89e829e39504d9cdf099168ae59d"),
        ("tiny-frozen-lake-history", 3, "edc5a68b44d0963fd71ddc0fdfa83b69cc4d04c543c3db3ee75fe36d9a77509d"),
    ],
    ids=["tiny-frozen-lake", "tiny-frozen-lake-history"],
)
def test_a_cached_build_is_found_only_for_the_warm_up_data_it_was_built_from(name, revision, digest):
    """Cached models are found by name and revision only: a change of the warm-up data needs a new revision
    (the history model's digest was taken before `TinyModelSpec.envs` existed, so its cached builds stay)."""
    spec = BUILTIN_MODELS[name]
    examples = format_warmup_examples(spec)
    assert len(examples) == 4000
    assert (spec.revision, hashlib.sha256(json.dumps(examples).encode()).hexdigest()) == (revision, digest)


def test_the_sokoban_model_warms_up_on_sokoban_rooms_alone():
    for messages, response in format_warmup_examples(_small("tiny-sokoban")):
        assert [m["role"] for m in messages] == ["user"]
        assert set(messages[0]["content"]) <= SOKOBAN_SYMBOLS and messages[0]["content"].startswith("#")
        assert response in {f"<answer>{a}</answer>" for a in ("Up", "Down", "Left", "Right")}


def test_a_multi_env_model_interleaves_episodes_of_its_envs():
    spec = _small("tiny-agentic")
    assert [w.env_type for w in spec.envs] == ["frozen_lake", "sokoban"]
    examples = format_warmup_examples(spec)
    envs = ["sokoban" if "#" in messages[-1]["content"] else "frozen_lake" for messages, _ in examples]
    runs = [e for i, e in enumerate(envs) if i == 0 or e != envs[i - 1]]  # one entry per episode
    assert runs == (["frozen_lake", "sokoban"] * len(runs))[: len(runs)] and len(runs) > 50
    assert 0.35 < envs.count("sokoban") / len(envs) < 0.65


def _neighbours_from_the_env_state(env) -> str:
    """The reference: the env's own map and move function, not the text board."""
    from roll_envs.envs.frozen_lake import ACTIONS, move

    flat = "".join(env.desc)
    cells = []
    for action, name in enumerate(ACTIONS):
        there = move(env.desc, env.position, action)
        cells.append(
            f"{name} {'edge' if there == env.position else {'H': 'O', 'G': 'G'}.get(flat[there], '_')}"
        )
    return " ".join(cells)


def test_the_neighbours_read_off_a_text_board_match_the_env_state():
    import roll_envs

    env = roll_envs.make("frozen_lake", size=5)
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        assert frozen_lake_neighbours(obs) == _neighbours_from_the_env_state(env)
    assert frozen_lake_neighbours("_X\n_G") is None  # in a hole: no P on the board


def test_only_the_sighted_model_sees_perception_questions_and_they_name_cells_not_moves():
    assert perception_warmup_examples(_small("tiny-frozen-lake")) == []
    spec = dataclasses.replace(BUILTIN_MODELS["tiny-frozen-lake-sighted"], perception_examples=200)
    examples = perception_warmup_examples(spec)
    assert len(examples) == 200 and len({m[0]["content"] for m, _ in examples}) > 150
    for messages, answer in examples:
        board, question = messages[0]["content"].rsplit("\n", 1)
        assert [m["role"] for m in messages] == ["user"] and question == NEIGHBOUR_QUESTION
        assert answer == frozen_lake_neighbours(board) and "<answer>" not in answer
