"""The GEM, TextArena and reasoning-gym adapters: ids resolve through the namespaces, `check_env` passes
(with the interleaved same-seed check) on two envs of each library, answers are read in the library's
own format. Each library's tests skip when its extra is not installed."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import roll_envs
from roll_envs import EnvConfigError, UnknownEnvError, check_env

pytestmark = pytest.mark.adapters

LIBRARIES = {"gem": "gem", "textarena": "textarena", "reasoning_gym": "reasoning_gym"}
CASES = [
    ("gem:game:Minesweeper-v0-easy", "gem"),
    ("gem:game:GuessTheNumber-v0-easy", "gem"),
    ("textarena:TicTacToe-v0", "textarena"),
    ("textarena:GuessTheNumber-v0", "textarena"),
    ("reasoning_gym:basic_arithmetic", "reasoning_gym"),
    ("reasoning_gym:rotate_matrix", "reasoning_gym"),
]


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (roll-envs extra)")


def make(env_id: str, **config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # cellpylib, imported by reasoning-gym
        return roll_envs.make(env_id, **config)


@pytest.mark.parametrize(("env_id", "module"), CASES)
def test_check_env_passes_with_interleaved_instances(env_id, module):
    needs(module)
    assert (
        check_env(
            make(env_id, max_steps=6), seeds=(0, 1), turns=6, make_env=lambda: make(env_id, max_steps=6)
        )
        == []
    )


def test_namespace_ids_resolve_without_listing_and_unknown_prefixes_say_so():
    found = roll_envs.spec("textarena:TicTacToe-v0")
    assert found.defaults == {"env_id": "TicTacToe-v0"}
    assert {n.prefix for n in roll_envs.registered_namespaces()} >= {"gem", "textarena", "reasoning_gym"}
    with pytest.raises(UnknownEnvError, match=r"textarena:\*"):
        roll_envs.spec("nosuchlib:TicTacToe-v0")


def test_a_missing_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)  # as if not installed: importing it fails
    with pytest.raises(EnvConfigError, match=r"roll-envs\[textarena\]"):
        make("textarena:TicTacToe-v0")


def test_gem_reads_boxed_answers_and_keeps_gem_text():
    needs("gem")
    env = make("gem:game:GuessTheNumber-v0-easy")
    obs, _ = env.reset(seed=1)
    assert "\\boxed{" in obs  # GEM's own instructions pass through
    _, reward, _, _, info = env.step("I guess \\boxed{5}")
    assert info["action_is_valid"] and "guessed 5" in env.text_observation()
    _, reward, _, _, info = env.step("<answer>5</answer>")
    assert not info["action_is_valid"] and reward == pytest.approx(-0.1)


def test_textarena_refuses_an_occupied_cell_and_keys_states_by_board():
    needs("textarena")
    env = make("textarena:TicTacToe-v0")
    obs, info = env.reset(seed=1)
    assert "[4]" in obs and info["state_key"] != obs
    env.step("I play [4]")
    _, _, terminated, _, info = env.step("[4]")
    assert info["action_is_refused"] and not terminated


def test_reasoning_gym_scores_a_multi_line_answer_as_written():
    needs("reasoning_gym")
    env = make("reasoning_gym:rotate_matrix")
    env.reset(seed=3)
    answer = env._entry["answer"]
    assert "\n" in answer and "<answer>" in env.instruction
    _, reward, terminated, _, info = env.step(f"<think>rotate</think><answer>\n{answer}\n</answer>")
    assert reward == 1.0 and terminated and info["success"]
