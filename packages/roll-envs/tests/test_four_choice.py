"""FourChoice: rewards against a key written out here from the env's spec, seeded episodes, invalid answers,
its baselines against a fixed-answer policy played through the env, and the registrations."""

from __future__ import annotations

import re

import gymnasium
import pytest
import roll_envs
from roll_envs import EnvConfigError, FourChoiceEnv, env_baselines, four_choice_baselines, has_baselines
from roll_envs.baseline_types import HELD_OUT_SEED_START

REFERENCE_KEY = {"red": "C", "green": "A", "blue": "D", "yellow": "B"}
"""The answer key of the env's spec (roll_envs.envs.four_choice), restated here rather than imported from the env."""

LETTERS = ("A", "B", "C", "D")


def colour_shown(observation: str) -> str:
    """The colour named by an observation, read from its text."""
    found = re.fullmatch(r"The light is (red|green|blue|yellow)\.", observation)
    assert found, observation
    return found.group(1)


def test_every_answer_scores_as_the_reference_key_says():
    env = roll_envs.make("four_choice")
    for seed in range(40):
        for letter in LETTERS:
            colour = colour_shown(env.reset(seed=seed)[0])
            obs, reward, terminated, truncated, info = env.step(f"<answer>{letter}</answer>")
            right = letter == REFERENCE_KEY[colour]
            assert (reward, terminated, truncated) == (float(right), True, False)
            assert info["success"] is right and info["action_is_valid"] and info["action_is_effective"]
            assert info["executed_actions"] == [letter]
            assert obs == f"The light is {colour}. You answered {letter}: {'right' if right else 'wrong'}."


def test_answers_are_read_case_insensitively_and_after_a_thought():
    env = roll_envs.make("four_choice")
    env.reset(options={"colour": "green"})
    assert env.step("<think>green is A?</think><answer> a </answer>")[1] == 1.0


def test_the_same_seed_shows_the_same_colour_and_seeds_show_all_four_evenly():
    env, again = roll_envs.make("four_choice"), roll_envs.make("four_choice")
    shown = [colour_shown(env.reset(seed=seed)[0]) for seed in range(2000)]
    assert shown == [colour_shown(again.reset(seed=seed)[0]) for seed in range(2000)]
    for colour in REFERENCE_KEY:  # 500 expected each; 4.5 standard deviations is about 87
        assert abs(shown.count(colour) - 500) < 90, (colour, shown.count(colour))


def test_an_invalid_answer_is_a_no_op_that_ends_the_turn_budget():
    env = roll_envs.make("four_choice", format_penalty=0.5)
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("<answer>E</answer>")
    assert (reward, terminated, truncated) == (-0.5, False, True)  # one turn by default
    assert not info["action_is_valid"] and not info["success"] and obs == env.reset(seed=3)[0]
    retry = roll_envs.make("four_choice", max_steps=3)
    colour = colour_shown(retry.reset(seed=3)[0])
    assert retry.step("C, I think")[2:4] == (False, False)  # no tags: invalid, and a second turn is left
    assert retry.step(f"<answer>{REFERENCE_KEY[colour]}</answer>")[1:3] == (1.0, True)


def test_a_given_colour_is_checked():
    env = roll_envs.make("four_choice")
    assert env.reset(options={"colour": "blue"})[0] == "The light is blue."
    with pytest.raises(EnvConfigError, match="options\\['colour'\\] must be one of"):
        env.reset(options={"colour": "purple"})


def test_a_configured_colour_shows_on_every_seed_and_an_option_still_wins():
    env = roll_envs.make("four_choice", colour="yellow")
    assert {colour_shown(env.reset(seed=seed)[0]) for seed in range(50)} == {"yellow"}
    assert env.step("<answer>B</answer>")[1] == 1.0
    assert env.reset(seed=0, options={"colour": "red"})[0] == "The light is red."
    assert roll_envs.check_env(env, seeds=(0, 1)) == []
    with pytest.raises(EnvConfigError, match="colour"):
        roll_envs.make("four_choice", colour="purple")


def test_a_configured_colour_has_a_fixed_answer_that_always_wins():
    env = roll_envs.make("four_choice", colour="blue")
    episodes = 50
    wins = {letter: 0 for letter in LETTERS}
    for seed in range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes):
        for letter in LETTERS:
            env.reset(seed=seed)
            wins[letter] += env.step(f"<answer>{letter}</answer>")[1] == 1.0
    assert wins == {"A": 0, "B": 0, "C": 0, "D": episodes}
    found = env_baselines(env, turns=1, episodes=episodes)
    assert found is not None and found.success == {"random": 0.25, "best_fixed_answer": 1.0}


def test_the_env_passes_check_env_and_is_registered_with_gymnasium():
    assert roll_envs.check_env(roll_envs.make("four_choice"), seeds=tuple(range(8))) == []
    env = gymnasium.make("roll_envs/FourChoice-v0")
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info["success"] is False
    env.close()


def test_baselines_match_fixed_answers_played_through_the_env():
    episodes = 400
    env = roll_envs.make("four_choice")
    wins = dict.fromkeys(LETTERS, 0)
    for seed in range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes):
        for letter in LETTERS:
            env.reset(seed=seed)
            wins[letter] += env.step(f"<answer>{letter}</answer>")[1] == 1.0
    assert sum(wins.values()) == episodes  # exactly one letter is right on each episode
    found = env_baselines(env, turns=1, episodes=episodes)
    assert has_baselines(env) and found is not None and found.env == "FourChoice"
    assert found.success == four_choice_baselines(episodes)
    assert found.success["random"] == 0.25
    assert found.success["best_fixed_answer"] == max(wins.values()) / episodes
    assert 0.25 <= found.success["best_fixed_answer"] < 0.32


def test_the_docstring_example_plays_the_seeded_colour():
    env = FourChoiceEnv()
    colour = colour_shown(env.reset(seed=0)[0])
    assert env.step(f"<answer>{REFERENCE_KEY[colour]}</answer>")[1:3] == (1.0, True)
