"""`check_players`: the multi-player part of `check_env` (`BaseEnv.players`), on one seeded game.

Each problem says what was expected, what came, and how to fix it. A single-agent env (no `players`)
has nothing to check here.
"""

from __future__ import annotations

import copy
import math
from typing import Any


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_move_info(info: dict[str, Any], players: tuple[str, ...], mover: str, where: str) -> list[str]:
    """A multi-player step's info: who moved, who moves next, every player's reward and success."""
    problems = []
    if info.get("player") != mover:
        problems.append(
            f"{where}: info['player'] is {info.get('player')!r}, expected the player to move, {mover!r}."
        )
    if info.get("next_player") not in (*players, ""):
        problems.append(
            f"{where}: info['next_player'] {info.get('next_player')!r} is not one of {players} or ''."
        )
    rewards = info.get("rewards")
    if not isinstance(rewards, dict) or set(rewards) - set(players):
        problems.append(
            f"{where}: info['rewards'] must map players {players} to rewards; got {rewards!r:.200}."
        )
    elif not all(_is_finite_number(v) for v in rewards.values()):
        problems.append(
            f"{where}: info['rewards'] {rewards!r:.200} holds a value that is not a finite number."
        )
    success = info.get("player_success")
    if not isinstance(success, dict) or set(success) != set(players):
        problems.append(
            f"{where}: info['player_success'] must map each of {players} to a bool; got {success!r:.200}."
        )
    return problems


def check_players(env: Any, seed: int, turns: int = 30) -> list[str]:
    """Play one game of `env`, each seat by its first fixed policy (or the first listed action), and check
    the players' info at every move and each fixed policy's answer in every state."""
    players = tuple(getattr(env, "players", ()) or ())
    if not players:
        return []
    if len(set(players)) != len(players) or not all(isinstance(p, str) and p for p in players):
        return [f"players must be distinct non-empty strings; got {players!r}."]
    _, info = env.reset(seed=seed)
    problems: list[str] = []
    mover = info.get("next_player")
    if mover not in players:
        return [
            f"reset: info['next_player'] is {mover!r}; expected the player to move first, one of {players}."
        ]
    for turn in range(turns):
        if env.current_player != mover:
            return [
                f"turn {turn}: current_player is {env.current_player!r} but info['next_player'] said {mover!r}."
            ]
        answers = [(name, env.fixed_policy_answer(name)) for name in env.fixed_policies]
        problems += _check_answers(env, seed, turn, answers)
        text = answers[0][1] if answers else env.format_answer((env.valid_actions or ["0"])[0])
        _, _, terminated, truncated, info = env.step(text)
        problems += check_move_info(info, players, mover, f"seed {seed} turn {turn}")
        if problems or terminated or truncated:
            return problems
        mover = info.get("next_player")
    return problems


def _check_answers(env: Any, seed: int, turn: int, answers: list[tuple[str, str]]) -> list[str]:
    """Each fixed policy's answer is text the env reads as a legal move (played on a copy of the env)."""
    problems = []
    for name, text in answers:
        where = f"seed {seed} turn {turn}: fixed_policy_answer({name!r})"
        if not isinstance(text, str):
            problems.append(f"{where} returned {type(text).__name__}; it must be the turn text.")
            continue
        info = copy.deepcopy(env).step(text)[4]
        if not info.get("action_is_valid") or info.get("action_is_refused"):
            problems.append(
                f"{where} returned {text!r:.80}, which the env does not play (action_is_valid "
                f"{info.get('action_is_valid')}, action_is_refused {info.get('action_is_refused')}); a fixed "
                "policy must answer a legal move in the env's answer format (use env.format_answer)."
            )
    return problems
