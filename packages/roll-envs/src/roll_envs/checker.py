"""`check_env`: the contract a roll env must meet, checked the way the pipeline will use the env.

Each `check_*` function returns a list of problems; every problem says what was expected, what
came, and how to fix it. `check_env` runs them all and raises one `CheckEnvError` listing every
problem (or returns the empty list). The checks of answers that are no action, of players, of
demonstrations and of the random-state declaration live in `checker_answers`, `checker_players`,
`checker_demonstration` and `checker_random`.

`check_env` calls the env as roll's env manager does: each instance with its own state of Python's
`random` and numpy's `np.random`, reseeded by `reset(seed=...)` (`roll_envs.random_state`). So an env
that draws from those global generators passes; one that depends on time, an unseeded generator or
state shared between instances fails `check_interleaved`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import random
import warnings
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from roll_envs.checker_answers import answer_text, check_garbage, check_reward_rule, current_actions
from roll_envs.checker_demonstration import check_demonstration
from roll_envs.checker_players import check_players
from roll_envs.checker_random import check_random_state_declaration
from roll_envs.errors import CheckEnvError, GarbagePaysWarning
from roll_envs.random_state import IsolatedEnv

REQUIRED_INFO = {"action_is_valid": bool, "action_is_effective": bool, "success": bool, "metrics": dict}
"""Info keys every reset and step must return, with their types."""

OPTIONAL_INFO = {"action_is_refused": bool}
"""Info keys a reset or step may return, with their types (`BaseEnv` always returns them)."""

PROBE_ANSWERS = ("0", "1", "2", "42", "-1", "yes", "no", "A")
"""Answers played in an open answer space (`valid_actions` None): each may be valid or not."""


def check_interface(env: Any) -> list[str]:
    """The env has reset/step/render/close and a non-empty `instruction` (`valid_actions` is optional)."""
    problems = [
        f"env has no callable {name}(); fix: subclass roll_envs.BaseEnv, which provides it."
        for name in ("reset", "step", "render", "close")
        if not callable(getattr(env, name, None))
    ]
    instruction = getattr(env, "instruction", None)
    if not isinstance(instruction, str) or not instruction.strip():
        problems.append(
            f"env.instruction should be a non-empty str (the system prompt); got {instruction!r}. "
            "Fix: describe the task, the symbols, the actions and the answer format (e.g. <answer>...</answer>)."
        )
    return problems


def check_info(info: Any, where: str) -> list[str]:
    """The info dict has the required keys and types, and float metrics."""
    if not isinstance(info, dict):
        return [f"{where}: info should be a dict; got {type(info).__name__}."]
    problems = []
    for key, kind in REQUIRED_INFO.items():
        if key not in info:
            problems.append(f"{where}: info lacks {key!r}; fix: always return {sorted(REQUIRED_INFO)}.")
        elif type(info[key]) is not kind:
            problems.append(
                f"{where}: info[{key!r}] should be {kind.__name__}; got {type(info[key]).__name__} "
                f"({info[key]!r}). Fix: convert it, e.g. bool(...) for numpy booleans."
            )
    for key, kind in OPTIONAL_INFO.items():
        if key in info and type(info[key]) is not kind:
            problems.append(
                f"{where}: info[{key!r}] should be {kind.__name__}; got {type(info[key]).__name__} "
                f"({info[key]!r}). Fix: convert it, e.g. bool(...), or leave the key out."
            )
    for name, value in (info.get("metrics") or {}).items():
        if not isinstance(name, str) or type(value) not in (float, int):
            problems.append(
                f"{where}: metric {name!r} should map a str to a float; got {type(value).__name__}. Fix: float(value)."
            )
    return problems


def check_reset(env: Any, seed: int) -> list[str]:
    """reset(seed=...) returns (str observation, info)."""
    out = env.reset(seed=seed)
    if not isinstance(out, tuple) or len(out) != 2:
        return [f"reset() should return (obs, info); got {type(out).__name__} {out!r:.80}."]
    obs, info = out
    problems = [] if isinstance(obs, str) else [f"reset(): obs should be a str; got {type(obs).__name__}."]
    return problems + check_info(info, "reset()") + check_serialisable(obs, info, "reset()")


def check_step_result(out: Any, where: str) -> list[str]:
    """step() returns (str, float, bool, bool, info) and does not both terminate and truncate."""
    if not isinstance(out, tuple) or len(out) != 5:
        return [f"{where}: should return (obs, reward, terminated, truncated, info); got {out!r:.80}."]
    obs, reward, terminated, truncated, info = out
    problems = []
    if not isinstance(obs, str):
        problems.append(f"{where}: obs should be a str; got {type(obs).__name__}.")
    if type(reward) not in (float, int):
        problems.append(
            f"{where}: reward should be a Python float; got {type(reward).__name__}. Fix: float(reward)."
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if type(flag) is not bool:
            problems.append(
                f"{where}: {name} should be a bool; got {type(flag).__name__}. Fix: bool({name})."
            )
    if terminated is True and truncated is True:
        problems.append(
            f"{where}: terminated and truncated are both True; fix: truncate only unfinished episodes."
        )
    return problems + check_info(info, where) + check_serialisable(obs, info, where)


def check_serialisable(obs: Any, info: Any, where: str) -> list[str]:
    """obs and info survive a msgpack round trip unchanged (they cross process boundaries)."""
    try:
        packed = msgpack.packb({"obs": obs, "info": info})
        back = msgpack.unpackb(packed, raw=False, strict_map_key=False)
    except Exception as exc:
        return [
            f"{where}: obs/info are not msgpack-serialisable ({exc}). "
            "Fix: use only str, int, float, bool, None, lists and dicts with str keys (no numpy, no tuples of sets)."
        ]
    if back != {"obs": obs, "info": _as_lists(info)}:
        return [
            f"{where}: info changes through msgpack (tuples or non-str keys?); fix: use lists and str keys."
        ]
    return []


def _as_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_lists(v) for v in value]
    return value


def play(env: Any, seed: int, turns: int) -> tuple[list[Any], list[str]]:
    """Reset with `seed` and play `turns` random valid actions (`PROBE_ANSWERS` in an open answer space),
    each written in the env's answer format; returns the transcript and problems."""
    rng = random.Random(seed)
    obs, _ = env.reset(seed=seed)
    transcript: list[Any] = [obs]
    problems: list[str] = []
    for turn in range(turns):
        actions = current_actions(env)
        if actions is not None and not actions:
            problems.append(
                f"step {turn}: valid_actions is empty in a running episode; fix: list the actions "
                "(or return None for an open answer space)."
            )
            break
        out = env.step(answer_text(env, rng.choice(actions or PROBE_ANSWERS)))
        problems += check_step_result(out, f"seed {seed} step {turn}")
        if problems:
            break
        obs, reward, terminated, truncated, info = out
        if actions is not None and not info["action_is_valid"]:
            problems.append(
                f"seed {seed} step {turn}: a name from valid_actions was rejected as invalid; "
                "fix: make match_action accept every name valid_actions lists."
            )
        transcript.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return transcript, problems


def check_determinism(env: Any, seeds: tuple[int, ...], turns: int) -> list[str]:
    """The same seed (and actions) gives the same observations, rewards and flags."""
    problems = []
    for seed in seeds:
        first, found = play(env, seed, turns)
        second, _ = play(env, seed, turns)
        problems += found
        if first != second:
            at = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
            problems.append(
                f"seed {seed}: two runs differ at turn {at} ({first[at]!r:.60} vs {second[at]!r:.60}). "
                "Fix: draw all randomness from the rng passed to new_episode (or self.np_random)."
            )
    return problems


def check_interleaved(
    env: Any,
    seeds: tuple[int, ...],
    turns: int,
    make_env: Callable[[], Any] | None = None,
    isolate: bool = True,
) -> list[str]:
    """Two more instances, reset with one seed and stepped alternately with the same actions, each with its
    own state of `random` and `np.random` (as roll runs env slots), play the same episode. Returns at most
    one problem: the first seed whose two episodes differ.

    The instances are `make_env()` (each built under its own random state), else copies of `env`; with
    `isolate=False` their calls share the process's generators (as roll runs declared envs).
    """
    source = "make_env()" if make_env is not None else "copy.deepcopy(env)"
    try:
        pair = [
            IsolatedEnv.make(make_env) if make_env is not None else IsolatedEnv(copy.deepcopy(env))
            for _ in range(2)
        ]
        pair = pair if isolate else [instance.env for instance in pair]
    except Exception as exc:
        return [
            f"could not build two instances for the interleaving check: {source} raised {exc!r}. "
            "Fix: pass make_env=<a function that builds the env> to check_env."
        ]
    try:
        for seed in seeds:  # the first seed that differs is enough to say what to fix
            if found := _interleave(pair, seed, turns):
                return found
        return []
    finally:
        for instance in pair:
            with contextlib.suppress(Exception):  # a failing close must not hide the check's answer
                instance.close()


def _interleave(pair: list[Any], seed: int, turns: int) -> list[str]:
    """Reset both with `seed`, then step them alternately; the first difference as a problem."""
    rng = random.Random(seed)
    first, second = pair[0].reset(seed=seed)[0], pair[1].reset(seed=seed)[0]
    for turn in range(turns + 1):
        if first != second:
            where = "after reset" if turn == 0 else f"at turn {turn}"
            return [
                f"seed {seed}: two instances reset with this seed and stepped alternately with the same "
                f"actions differ {where} ({first!r:.60} vs {second!r:.60}), although each ran with its own "
                "state of `random` and `np.random` (as roll runs env slots). The env depends on something "
                "outside its seed: state shared between instances (a module- or class-level counter or "
                "cache), the time, os.urandom/uuid, or an unseeded np.random.default_rng(). Fix: draw all "
                "randomness from the rng passed to new_episode (or self.np_random) and keep the episode's "
                "state on the instance."
            ]
        actions = current_actions(pair[0]) if turn < turns else []
        if actions == [] or (turn and (first[2] or first[3])):
            return []
        text = answer_text(pair[0], rng.choice(actions or PROBE_ANSWERS))
        first, second = pair[0].step(text)[:4], pair[1].step(text)[:4]
    return []


def check_time_limit(env: Any, seed: int) -> list[str]:
    """With a `config.max_steps`, an episode ends (terminated or truncated) within that many turns."""
    limit = getattr(getattr(env, "config", None), "max_steps", None)
    if not isinstance(limit, int) or limit > 1000:
        return []
    transcript, problems = play(env, seed, limit)
    if problems:
        return problems
    last = transcript[-1]
    if len(transcript) - 1 == limit and not (isinstance(last, tuple) and (last[2] or last[3])):
        return [
            f"seed {seed}: the episode is still running after max_steps={limit} turns; expected truncated=True."
        ]
    return []


def check_render(env: Any, seed: int) -> list[str]:
    """Every mode in metadata['render_modes']: `text` gives a str, `rgb_array` an (H, W, 3) uint8 array."""
    env.reset(seed=seed)
    problems = []
    for mode in env.metadata.get("render_modes", []):
        frame = env.render(mode)
        if mode == "text" and not isinstance(frame, str):
            problems.append(f"render('text') should return a str; got {type(frame).__name__}.")
        if mode == "rgb_array" and not (
            isinstance(frame, np.ndarray)
            and frame.dtype == np.uint8
            and frame.ndim == 3
            and frame.shape[2] == 3
        ):
            got = getattr(frame, "shape", type(frame).__name__)
            problems.append(f"render('rgb_array') should return an (H, W, 3) uint8 array; got {got}.")
    return problems


def check_env(
    env: Any,
    seeds: tuple[int, ...] = (0, 1, 2),
    turns: int = 30,
    raise_on_error: bool = True,
    make_env: Callable[[], Any] | None = None,
) -> list[str]:
    """Run every check on `env`; raise `CheckEnvError` listing all problems (or return them).

    The env is called as roll calls it: with its own state of `random` and `np.random`, reseeded by each
    `reset(seed=...)`. `check_interleaved` steps two more instances alternately: `make_env()` when given
    (a function that builds the env), else copies of `env`. `check_random_state_declaration` checks the
    env's `owns_random_state` (a declared env is also interleaved without isolation) and logs a note for each
    hosting hint its class inherits but does not keep (`roll_envs.hints`).

    A multi-player env (`players`) is also played seat by seat (`check_players`): who moved, who moves
    next, every player's reward, and each fixed policy's answer in every state. An env with a
    `demonstration()` follows it from each seed (`check_demonstration`): each must be a valid answer.

    An env that passes is also checked for the reward rule (`check_reward_rule`); where an answer with
    no valid action scores more than a valid action, a `GarbagePaysWarning` says which penalty fixes it.

    >>> import roll_envs
    >>> check_env(roll_envs.make("frozen_lake"))
    []
    """
    problems = check_interface(env)
    isolated = IsolatedEnv(env)
    unisolated = functools.partial(check_interleaved, env, seeds, turns, make_env, isolate=False)
    if not problems:
        for check in (
            lambda: check_reset(isolated, seeds[0]),
            lambda: check_determinism(isolated, seeds, turns),
            lambda: check_interleaved(env, seeds, turns, make_env),
            lambda: check_time_limit(isolated, seeds[0]),
            lambda: check_garbage(isolated, seeds[0]),
            lambda: check_render(isolated, seeds[0]),
            lambda: check_players(isolated, seeds[0], turns),
            lambda: check_demonstration(isolated, seeds, turns),
            lambda: check_random_state_declaration(env, isolated.drew_from_globals, unisolated),
        ):
            try:
                problems += check()
            except Exception as exc:
                problems.append(f"the env raised {exc!r} during the checks; fix the env so that it does not.")
        if not problems:
            for warning in check_reward_rule(isolated, seeds[0]):
                warnings.warn(f"{type(env).__name__}: {warning}", GarbagePaysWarning, stacklevel=2)
    if problems and raise_on_error:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise CheckEnvError(f"{type(env).__name__} fails {len(problems)} check(s):\n{listing}")
    return problems
