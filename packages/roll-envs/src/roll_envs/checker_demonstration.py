"""`check_demonstration`: the part of `check_env` that checks `BaseEnv.demonstration`.

An env's demonstration is an expert's answer for the current state (imitation data, a teacher's turn), so
it must be a valid answer in the env's own answer format: `step` must read it (`action_is_valid`). An env
whose `demonstration()` returns None after reset (no expert, the default) is not checked.
"""

from __future__ import annotations

from typing import Any


def check_demonstration(env: Any, seeds: tuple[int, ...], turns: int) -> list[str]:
    """From `reset(seed)` for each of `seeds`, follow `demonstration()` for up to `turns` turns (until it
    returns None or the episode ends); each answer must be a str that `step` reads as a valid answer.
    Returns at most one problem per seed."""
    name = type(getattr(env, "env", env)).__name__  # the env inside an IsolatedEnv
    problems = []
    for seed in seeds:
        env.reset(seed=seed)
        for turn in range(turns):
            answer = env.demonstration() if callable(getattr(env, "demonstration", None)) else None
            if answer is None:
                break
            where = f"{name}: seed {seed} turn {turn}: demonstration()"
            if not isinstance(answer, str):
                problems.append(
                    f"{where} returned {type(answer).__name__} {answer!r:.60}; expected a str or None."
                )
                break
            _, _, terminated, truncated, info = env.step(answer)
            if not info.get("action_is_valid"):
                problems.append(
                    f"{where} returned {answer!r:.200}, which step() reads as an invalid answer "
                    "(action_is_valid False). Fix: write it with self.format_answer(action), an action "
                    "the env accepts in this state (valid_actions), or return None."
                )
                break
            if terminated or truncated:
                break
    return problems
