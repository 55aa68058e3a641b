"""The trajectory schema that crosses process boundaries, encoded as msgpack.

A trajectory is one episode of one env: per-turn prompt and response token ids exactly as the model
saw and sampled them (token-in/token-out), the inference log-probs, the env's reward and flags per
turn, a state key per turn (GiGPO anchors) and the policy version that produced each turn.

Payloads carry a schema name and version; `decode_trajectory` validates both and every field's type,
so a corrupt or foreign payload fails with a clear `PayloadError` instead of deep inside training.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

import msgpack

from roll_rollout.errors import PayloadError

SCHEMA_NAME = "roll.trajectory"
SCHEMA_VERSION = 1


@dataclass
class Turn:
    """One agent turn: the prompt the model saw, what it sampled, and what the env answered."""

    prompt_ids: list[int]
    response_ids: list[int]
    log_probs: list[float]
    reward: float
    action_is_valid: bool
    action_is_effective: bool
    state_key: str
    policy_version: int = 0
    finish_reason: str = "stop"
    response_text: str = ""

    @property
    def anchor_id(self) -> int:
        """A stable signed 64-bit hash of `state_key` (GiGPO groups turns by it)."""
        return stable_hash(self.state_key)


@dataclass
class Trajectory:
    """One episode of one env slot; `group_id` groups the envs that share the episode seed."""

    env_id: int
    group_id: int
    episode_id: int
    tag: str
    seed: int
    turns: list[Turn] = field(default_factory=list)
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def score(self) -> float:
        """Sum of the env rewards of every turn."""
        return float(sum(t.reward for t in self.turns))

    @property
    def num_response_tokens(self) -> int:
        """Generated tokens over all turns."""
        return sum(len(t.response_ids) for t in self.turns)


def stable_hash(text: str) -> int:
    """A signed 64-bit hash of `text` that is the same in every process (unlike `hash`)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


_TURN_TYPES: dict[str, tuple[type, ...]] = {
    "prompt_ids": (list,),
    "response_ids": (list,),
    "log_probs": (list,),
    "reward": (float, int),
    "action_is_valid": (bool,),
    "action_is_effective": (bool,),
    "state_key": (str,),
    "policy_version": (int,),
    "finish_reason": (str,),
    "response_text": (str,),
}
_TRAJ_TYPES: dict[str, tuple[type, ...]] = {
    "env_id": (int,),
    "group_id": (int,),
    "episode_id": (int,),
    "tag": (str,),
    "seed": (int,),
    "turns": (list,),
    "success": (bool,),
    "terminated": (bool,),
    "truncated": (bool,),
    "metrics": (dict,),
    "error": (str, type(None)),
}


def encode_trajectory(traj: Trajectory) -> bytes:
    """Encode a trajectory as a versioned msgpack payload."""
    body = asdict(traj)
    return msgpack.packb({"schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "trajectory": body})


def decode_trajectory(payload: bytes) -> Trajectory:
    """Decode and validate a payload made by `encode_trajectory`; raise `PayloadError` otherwise."""
    try:
        msg = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise PayloadError(f"trajectory payload is not valid msgpack ({type(exc).__name__}: {exc})") from exc
    if not isinstance(msg, dict) or msg.get("schema") != SCHEMA_NAME:
        got = msg.get("schema") if isinstance(msg, dict) else type(msg).__name__
        raise PayloadError(f"expected a '{SCHEMA_NAME}' payload, got schema {got!r}")
    if msg.get("version") != SCHEMA_VERSION:
        raise PayloadError(
            f"trajectory schema version {msg.get('version')!r} is not supported (expected {SCHEMA_VERSION}); "
            "producer and consumer run different roll-rollout versions: install the same version on both"
        )
    body = msg.get("trajectory")
    _check_fields(body, _TRAJ_TYPES, "trajectory")
    turns = []
    for i, raw in enumerate(body["turns"]):
        _check_fields(raw, _TURN_TYPES, f"trajectory.turns[{i}]")
        if len(raw["log_probs"]) != len(raw["response_ids"]):
            raise PayloadError(
                f"trajectory.turns[{i}]: {len(raw['log_probs'])} log_probs for "
                f"{len(raw['response_ids'])} response ids; they must have the same length"
            )
        turns.append(Turn(**raw))
    return Trajectory(**{**body, "turns": turns})


def _check_fields(obj: Any, types: dict[str, tuple[type, ...]], where: str) -> None:
    if not isinstance(obj, dict):
        raise PayloadError(f"{where}: expected a map, got {type(obj).__name__}")
    missing = sorted(set(types) - set(obj))
    extra = sorted(set(obj) - set(types))
    if missing or extra:
        raise PayloadError(f"{where}: missing fields {missing}, unknown fields {extra}")
    for name, allowed in types.items():
        if not isinstance(obj[name], allowed):
            names = "/".join(t.__name__ for t in allowed)
            raise PayloadError(f"{where}.{name}: expected {names}, got {type(obj[name]).__name__}")
