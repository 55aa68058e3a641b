"""Errors of roll-rollout: each message says what was expected, what came, and how to fix it."""

from __future__ import annotations


class RolloutError(Exception):
    """Base class of every roll-rollout error."""


class PayloadError(RolloutError):
    """A msgpack payload is corrupt, foreign, or of an unsupported schema version."""


class SchedulerError(RolloutError):
    """The rollout scheduler was asked for something its configuration cannot give."""
