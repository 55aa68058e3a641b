"""The parts of `check_env` about answers that are no action (`check_garbage`: never an exception, never
valid; `check_reward_rule`: never paying more than a valid action), and `answer_text`, which writes an action
in the env's answer format for every check and for `roll-envs play`."""

from __future__ import annotations

import random
from typing import Any

from roll_envs.parsing import AnswerFormat, extract_answer, render_answer

GARBAGE_TURNS = ("", "no tags at all", "<answer></answer>", "<answer>\x00\x07</answer>", "x" * 100_000)
"""Turns that must be invalid actions, not exceptions."""

NO_ACTION_TURNS = ("", "no tags at all", "<answer></answer>")
"""Answers with no valid action, scored against the valid actions by `check_reward_rule`."""


def answer_format(env: Any) -> AnswerFormat:
    """The env's `config.answer_format` (`tags` for an env without one)."""
    value = getattr(getattr(env, "config", None), "answer_format", AnswerFormat.TAGS)
    try:
        return AnswerFormat(value)
    except ValueError:
        return AnswerFormat.TAGS


def answer_text(env: Any, action: str) -> str:
    """A turn answering `action` in the env's answer format (`<answer>action</answer>` by default)."""
    return render_answer([action], answer_format(env))


def current_actions(env: Any) -> list[str] | None:
    """The env's `valid_actions` in its current state, or None for an open answer space (or none given)."""
    actions = getattr(env, "valid_actions", None)
    return None if actions is None else list(actions)


def check_garbage(env: Any, seed: int) -> list[str]:
    """Malformed turns are never exceptions; those with no answer in the env's answer format are invalid
    actions (`action_is_valid` False). In the `raw` format some are answers, which an open answer space
    may accept."""
    env.reset(seed=seed)
    problems = []
    fmt = answer_format(env)
    for text in GARBAGE_TURNS:
        try:
            out = env.step(text)
        except Exception as exc:
            problems.append(
                f"step({text!r:.30}) raised {exc!r}; fix: treat unparsable text as an invalid action."
            )
            continue
        if (
            extract_answer(text, fmt) in (None, "")
            and isinstance(out, tuple)
            and len(out) == 5
            and isinstance(out[4], dict)
            and out[4].get("action_is_valid")
        ):
            problems.append(
                f"step({text!r:.30}) was accepted as a valid action; expected action_is_valid False."
            )
    return problems


def replay(env: Any, seed: int, prefix: list[str]) -> Any:
    """Reset with `seed` and play the turns of `prefix`; the last step's result (None if none)."""
    env.reset(seed=seed)
    out = None
    for text in prefix:
        out = env.step(text)
    return out


def reward_after(env: Any, seed: int, prefix: list[str], text: str) -> tuple[float, bool]:
    """(reward, action_is_valid) of `text` played in the state that `prefix` reaches."""
    replay(env, seed, prefix)
    _, reward, _, _, info = env.step(text)
    return float(reward), bool(info.get("action_is_valid"))


def check_reward_rule(env: Any, seed: int, turns: int = 8, max_actions: int = 16) -> list[str]:
    """Garbage never pays: from each state of a random episode, an answer with no valid action scores
    no more than the worst valid action (at most `max_actions` of them tried per state). Not checked in
    an open answer space (`valid_actions` None): there is no list of valid actions to compare with.

    States are revisited by resetting with `seed` and replaying the turns so far (the env must be
    deterministic, which `check_determinism` checks). Returns at most one problem: the state where
    garbage pays most, with the `format_penalty` that would make it pay no more than that action.
    """
    rng = random.Random(seed)
    prefix: list[str] = []
    worst_case: tuple[float, int, float, float, str] | None = None  # (excess, turn, garbage, reward, action)
    for turn in range(turns):
        replay(env, seed, prefix)
        actions = current_actions(env)
        if not actions:
            break
        tried = actions if len(actions) <= max_actions else rng.sample(actions, max_actions)
        garbage = max(reward_after(env, seed, prefix, text)[0] for text in NO_ACTION_TURNS)
        scored = [(reward_after(env, seed, prefix, answer_text(env, a)), a) for a in tried]
        valid = [(reward, a) for (reward, ok), a in scored if ok]
        if valid and garbage - min(valid)[0] > max(1e-9, worst_case[0] if worst_case else 0.0):
            reward, action = min(valid)
            worst_case = (garbage - reward, turn, garbage, reward, action)
        prefix.append(answer_text(env, rng.choice(actions)))
        _, _, terminated, truncated, _ = replay(env, seed, prefix)
        if terminated or truncated:
            break
    if worst_case is None:
        return []
    excess, turn, garbage, reward, action = worst_case
    penalty = float(getattr(getattr(env, "config", None), "format_penalty", 0.0))
    return [
        f"seed {seed} turn {turn}: an answer with no valid action scores {garbage:g}, more than the valid "
        f"action {action!r} ({reward:g}): a policy can learn to stop answering. Fix: set format_penalty to "
        f"at least {penalty + excess:g} (now {penalty:g}), minus the worst reward of one action."
    ]
