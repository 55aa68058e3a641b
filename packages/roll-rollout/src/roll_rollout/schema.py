"""The trajectory schema that crosses process boundaries, encoded as msgpack.

A trajectory is one episode of one env: per-turn prompt and response token ids exactly as the model
saw and sampled them (token-in/token-out), the inference log-probs, the env's reward and flags per
turn, the observation each turn acted on and the env's key of that state (GiGPO anchors), and the
policy version that produced each turn.

Payloads carry a schema name and version. `decode_trajectory` checks both, then decodes the body with
msgspec into typed structs that mirror `Turn` and `Trajectory` field for field, so every value is
checked down to its element type and range (the rules are in `roll_rollout.wire`): a corrupt, foreign
or out-of-range payload fails with a `PayloadError` naming the field path, never deep inside training.
Unknown and missing fields are errors too: the version says which fields a payload has. Version 2 added
`Turn.action_is_refused` and `Turn.observation`; version 1 payloads (written before them, e.g. saved
trajectory dumps) still decode, with `action_is_refused` False and `observation` equal to `state_key` (version
1 recorded the observation as the state key).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgspec

from roll_rollout.errors import PayloadError
from roll_rollout.wire import (
    MAX_TEXT_CHARS,
    Count,
    FiniteFloat,
    LogProb,
    Name,
    Text,
    TokenId,
    decode_typed,
)

SCHEMA_NAME = "roll.trajectory"
SCHEMA_VERSION = 2
"""The version `encode_trajectory` writes: 2, turns carry `action_is_refused` and `observation`."""

READ_VERSIONS = (1, 2)
"""The versions `decode_trajectory` reads: 1 is version 2 without `Turn.action_is_refused` and
`Turn.observation`."""

_ADDED_IN_2 = ("action_is_refused", "observation")
"""Turn fields a version 2 payload has and a version 1 payload has not."""


@dataclass
class Turn:
    """One agent turn: the prompt the model saw, what it sampled, and what the env answered.

    `action_is_valid`: the env read the answer into actions; `action_is_refused`: it refused one of them
    (a read action its rules do not allow in that state); a turn is valid and applied, refused, or unparsable.

    `observation` is the env's observation the turn acted on (the last one its prompt shows); `state_key`
    the env's key of that state (`info["state_key"]`, the observation when the env gives none): equal for
    equal states, it is the turn's GiGPO anchor (`anchor_id`) even where the observation carries more.
    """

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
    action_is_refused: bool = False
    observation: str = ""

    @property
    def anchor_id(self) -> int:
        """A stable signed 64-bit hash of `state_key` (GiGPO groups turns by it): `stable_hash(state_key)`."""
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
    """A signed 64-bit hash of `text` that is the same in every process (unlike `hash`).

    roll's one observation hash: the GiGPO anchor ids the pipeline trains on are `Turn.anchor_id`.
    """
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class _TurnWire(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """`Turn` as it travels: every field required, each with its range."""

    prompt_ids: list[TokenId]
    response_ids: list[TokenId]
    log_probs: list[LogProb]
    reward: FiniteFloat
    action_is_valid: bool
    action_is_effective: bool
    state_key: Text
    policy_version: Count
    finish_reason: Name
    response_text: Text
    action_is_refused: bool | msgspec.UnsetType = msgspec.UNSET  # required in version 2, absent in 1
    observation: Text | msgspec.UnsetType = msgspec.UNSET  # required in version 2, absent in 1


class _TrajectoryWire(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """`Trajectory` as it travels: every field required, each with its range."""

    env_id: Count
    group_id: Count
    episode_id: Count
    tag: Name
    seed: Count
    turns: list[_TurnWire]
    success: bool
    terminated: bool
    truncated: bool
    metrics: dict[Name, FiniteFloat]
    error: Text | None


class _Payload(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A whole payload, decoded in one pass (the fast path of a valid payload)."""

    schema: str
    version: int
    trajectory: _TrajectoryWire


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """Schema name and version alone, checked before the body when a payload fails: the body's layout
    depends on them, so a payload of another version is reported as such, not as a field error."""

    schema: Any = None
    version: Any = None
    trajectory: msgspec.Raw = msgspec.Raw()


_ENCODER = msgspec.msgpack.Encoder()
_PAYLOAD = msgspec.msgpack.Decoder(_Payload)
_ENVELOPE = msgspec.msgpack.Decoder(_Envelope)
_BODY = msgspec.msgpack.Decoder(_TrajectoryWire)
_CLIPPED = "\n[... error message clipped to fit the trajectory schema]"


def encode_trajectory(traj: Trajectory) -> bytes:
    """Encode a trajectory as a versioned msgpack payload (an over-long `error` text is clipped)."""
    if traj.error is not None and len(traj.error) > MAX_TEXT_CHARS:
        traj = dataclasses.replace(traj, error=traj.error[: MAX_TEXT_CHARS - len(_CLIPPED)] + _CLIPPED)
    return _ENCODER.encode({"schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "trajectory": traj})


def decode_trajectory(payload: bytes) -> Trajectory:
    """Decode and validate a payload made by `encode_trajectory`; raise `PayloadError` otherwise."""
    try:
        decoded = _PAYLOAD.decode(payload)
    except Exception:  # say what is wrong, in order: envelope, schema, version, then the body
        decoded = None
    if decoded is None or decoded.schema != SCHEMA_NAME or decoded.version not in READ_VERSIONS:
        _raise_payload_error(payload)
    body = decoded.trajectory
    turns = []
    for i, t in enumerate(body.turns):
        if len(t.log_probs) != len(t.response_ids):
            raise PayloadError(
                f"trajectory.turns[{i}]: {len(t.log_probs)} log_probs for {len(t.response_ids)} response "
                "ids; they must have the same length (one log-prob per sampled token)"
            )
        for name in _ADDED_IN_2:
            if (getattr(t, name) is msgspec.UNSET) != (decoded.version == 1):
                state = "has no field" if getattr(t, name) is msgspec.UNSET else "has an unknown field"
                raise PayloadError(
                    f"trajectory.turns[{i}]: {state} {name} for schema version {decoded.version} "
                    "(version 2 turns carry it, version 1 turns do not). The payload breaks the trajectory "
                    "schema: fix the code that built it (only encode values the dataclass types allow)"
                )
        turns.append(
            Turn(
                t.prompt_ids,
                t.response_ids,
                t.log_probs,
                t.reward,
                t.action_is_valid,
                t.action_is_effective,
                t.state_key,
                t.policy_version,
                t.finish_reason,
                t.response_text,
                t.action_is_refused is True,
                t.state_key if t.observation is msgspec.UNSET else t.observation,
            )
        )
    return Trajectory(
        body.env_id,
        body.group_id,
        body.episode_id,
        body.tag,
        body.seed,
        turns,
        body.success,
        body.terminated,
        body.truncated,
        body.metrics,
        body.error,
    )


def _raise_payload_error(payload: bytes) -> NoReturn:
    """Raise the `PayloadError` that first says what is wrong with a payload the fast path rejected."""
    envelope = decode_typed(_ENVELOPE, payload, "trajectory payload")
    if envelope.schema != SCHEMA_NAME:
        raise PayloadError(
            f"expected a {SCHEMA_NAME!r} payload, got schema {envelope.schema!r:.80}: "
            "this payload was not made by encode_trajectory"
        )
    if type(envelope.version) is not int or envelope.version not in READ_VERSIONS:
        raise PayloadError(
            f"trajectory schema version {envelope.version!r:.80} is not supported (expected the int "
            f"{SCHEMA_VERSION}, or 1 for payloads written before Turn.action_is_refused); producer and "
            "consumer run different roll-rollout versions: install the same version on both"
        )
    if not len(envelope.trajectory):
        raise PayloadError(
            "trajectory payload has no 'trajectory' body: it was not made by encode_trajectory"
        )
    decode_typed(_BODY, envelope.trajectory, "trajectory")
    raise PayloadError("trajectory payload is malformed")  # not reached: the body decode raised
