"""Episode seeds: the training stream stays below `VALIDATION_SEED_BASE`, validation seeds above it.

Also the check of a scheduler's saved seed-stream state (a checkpoint may be corrupt or come from
another roll version: it is validated before anything is restored).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["VALIDATION_SEED_BASE", "rng_state_problem", "sample_key", "validation_seeds"]

VALIDATION_SEED_BASE = 1_000_000_000


def validation_seeds(count: int, offset: int = 0) -> list[int]:
    """Fixed held-out seeds; never produced by `RolloutScheduler.next_seeds`."""
    return [VALIDATION_SEED_BASE + offset + i for i in range(count)]


def sample_key(seed: int, env_id: int, episode_id: int, turn: int) -> int:
    """The random stream of one turn's sampling, in [0, 2**63): the same key in every process and run.

    An episode's id comes from the scheduler's counter (saved in checkpoints), so a run replayed from the
    same state asks for the same keys, and the policy server samples each turn the same tokens whatever
    other turns share its batch. Seeds below `VALIDATION_SEED_BASE` and above keep training and validation
    streams apart.
    """
    packed = struct.pack("<4q", seed, env_id, episode_id, turn)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little") >> 1


OPTIONAL_STATE_KEYS = frozenset({"next_group"})
"""Keys a scheduler state may lack: checkpoints written before they existed did not hold them."""


def rng_state_problem(state: Any, expected: Mapping[str, Any]) -> str | None:
    """Why `state` is not a scheduler RNG state shaped like `expected`, or None."""
    required = set(expected) - OPTIONAL_STATE_KEYS
    if not isinstance(state, Mapping) or not required <= set(state) <= set(expected):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        return f"expected a map with keys {sorted(expected)}, got {got}"
    rng = state["rng"]
    if not isinstance(rng, Sequence) or len(rng) != len(expected["rng"]):
        return f"'rng' must be a list of {len(expected['rng'])} ints"
    if not all(type(v) is int and 0 <= v < 2**32 for v in rng):
        return "'rng' holds a value that is not an int in [0, 2**32)"
    for key in ("episodes", "groups"):
        if type(state[key]) is not int or state[key] < 0:
            return f"{key!r} must be an int >= 0, got {state[key]!r}"
    mix = state["tag_mix"]
    if not isinstance(mix, Mapping) or set(mix) != set(expected["tag_mix"]):
        return f"'tag_mix' must have the keys {sorted(expected['tag_mix'])}"
    if not all(type(v) is int and v >= 0 for v in mix.values()):
        return "'tag_mix' values must be ints >= 0"
    cursor = state.get("next_group", expected["next_group"])
    if not isinstance(cursor, Mapping) or set(cursor) != set(expected["next_group"]):
        return f"'next_group' must have the keys {sorted(expected['next_group'])}"
    if not all(type(v) is int and v >= 0 for v in cursor.values()):
        return "'next_group' values must be ints >= 0"
    return None
