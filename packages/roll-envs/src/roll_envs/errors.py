"""Errors of roll-envs: one small hierarchy whose messages say what was expected, what came, and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RollEnvsError(Exception):
    """Base class of every error raised by roll-envs on purpose."""


class EnvConfigError(RollEnvsError, ValueError):
    """An env config has an unknown key or a value out of range (the message names env, field, allowed values)."""


class UnknownEnvError(RollEnvsError, LookupError):
    """`make` or `spec` was given an id that no registered env has (the message suggests close matches)."""

    def __str__(self) -> str:  # LookupError would otherwise quote the message like a KeyError
        return str(self.args[0]) if self.args else ""


class RegistrationError(RollEnvsError, ValueError):
    """`register` got a duplicate id, a malformed entry point, or an entry point that does not load."""


class ResetNeeded(RollEnvsError, RuntimeError):
    """`step` or `render` was called before the first `reset`."""


class CheckEnvError(RollEnvsError, AssertionError):
    """`check_env` found a violation of the env contract (the message says what to change)."""


class IsolatedCallAbandoned(RollEnvsError, RuntimeError):
    """An isolated env call (`roll_envs.random_state`) was abandoned before it started, or run twice."""


class GarbagePaysWarning(UserWarning):
    """`check_env` found a state where an answer with no valid action scores more than a valid action."""


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """A ` Did you mean 'x' or 'y'?` suffix for an error message, or '' when nothing is close."""
    pool = list(candidates)
    lowered = {c.lower(): c for c in pool}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    if not close:
        return ""
    quoted = " or ".join(repr(lowered[c]) for c in close)
    return f" Did you mean {quoted}?"
