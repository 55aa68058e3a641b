"""What an env (or an agent) hands back, checked before a trajectory carries it: observations, state keys,
rewards and step metrics, each refused with an `EnvCallError` naming the value (the env is at fault, so only
its episode fails, not every trajectory of its worker when the payload is checked downstream); and
`close_quietly`, the close whose errors must not stop the other envs from closing."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from roll_rollout.hosting.env_calls import EnvCallError
from roll_rollout.wire import MAX_TEXT_CHARS


def check_observation(obs: Any, what: str) -> None:
    """An observation the trajectory can carry, else `EnvCallError`."""
    if not isinstance(obs, str):
        raise EnvCallError(f"env {what} returned an observation of type {type(obs).__name__}; it must be str")
    if len(obs) > MAX_TEXT_CHARS:
        raise EnvCallError(
            f"env {what} returned an observation of {len(obs)} characters; at most {MAX_TEXT_CHARS} travel"
        )


def state_key_of(obs: str, info: Any, what: str) -> str:
    """The env's key of the state `obs` shows (GiGPO's anchor): `info["state_key"]`, else the observation."""
    key = info.get("state_key") if isinstance(info, Mapping) else None
    if key is None:
        return obs
    if not isinstance(key, str):
        raise EnvCallError(
            f"env {what} returned info['state_key'] of type {type(key).__name__}; it must be a str "
            "(equal for equal states), or left out to use the observation"
        )
    if len(key) > MAX_TEXT_CHARS:
        raise EnvCallError(
            f"env {what} returned a state_key of {len(key)} characters; at most {MAX_TEXT_CHARS} travel "
            "(a hash of the state is enough)"
        )
    return key


def finite_reward(value: Any, source: str, error: Callable[[str], Exception] = EnvCallError) -> float:
    """`value` as a finite float, else `error(message)` raised, the message starting with `source`."""
    try:
        reward = float(value)
    except (TypeError, ValueError):
        raise error(f"{source} a reward of type {type(value).__name__}; it must be a number") from None
    if not math.isfinite(reward):
        raise error(f"{source} a non-finite reward ({reward}); rewards must be finite")
    return reward


def checked_step(obs: Any, reward: Any, info: Any) -> tuple[float, dict[str, float]]:
    """(finite reward, finite metrics) of a step, else `EnvCallError`."""
    check_observation(obs, "step")
    value = finite_reward(reward, "env step returned")
    metrics: dict[str, float] = {}
    for name, raw in ((info or {}).get("metrics") or {}).items():
        try:
            metrics[str(name)] = float(raw)
        except (TypeError, ValueError):
            raise EnvCallError(f"env step metric {name!r} is {raw!r}; metrics must be numbers") from None
        if not math.isfinite(metrics[str(name)]):
            raise EnvCallError(f"env step metric {name!r} is {raw}; metrics must be finite")
    return value, metrics


def close_quietly(env: Any) -> None:
    """`env.close()`, ignoring its errors (a broken env must not stop the others from closing)."""
    with contextlib.suppress(Exception):
        env.close()
