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
`Turn.action_is_refused` and `Turn.observation`; version 3 added the players of a multi-player game
(`Turn.player`, `Trajectory.player`, `Trajectory.player_success`). Older payloads (e.g. saved trajectory
dumps) still decode: a version 1 turn has `action_is_refused` False and `observation` equal to `state_key`
(version 1 recorded the observation as the state key), and a version 1 or 2 payload has no players.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgpack
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
SCHEMA_VERSION = 3
"""The version `encode_trajectory` writes: 3, turns and trajectories carry their player."""

READ_VERSIONS = (1, 2, 3)
"""The versions `decode_trajectory` reads: each is the next one without the fields that one added."""

_TURN_ADDED = {"action_is_refused": 2, "observation": 2, "player": 3}
_TRAJECTORY_ADDED = {"player": 3, "player_success": 3}
"""The version that added each field (a payload of an older version has none of them)."""


@dataclass
class Turn:
    """One agent turn: the prompt the model saw, what it sampled, and what the env answered.

    `action_is_valid`: the env read the answer into actions; `action_is_refused`: it refused one of them
    (a read action its rules do not allow in that state); a turn is valid and applied, refused, or unparsable.

    `observation` is the env's observation the turn acted on (the last one its prompt shows); `state_key`
    the env's key of that state (`info["state_key"]`, the observation when the env gives none): equal for
    equal states, it is the turn's GiGPO anchor (`anchor_id`) even where the observation carries more.
    `player` is the seat that took the turn in a multi-player game ("" for one agent); its `reward` is
    that player's reward from this move until its next one (the other players' moves included).
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
    player: str = ""

    @property
    def anchor_id(self) -> int:
        """A stable signed 64-bit hash of `state_key` (GiGPO groups turns by it): `stable_hash(state_key)`."""
        return stable_hash(self.state_key)


@dataclass
class Trajectory:
    """One episode of one env slot; `group_id` groups the envs that share the episode seed.

    A multi-player game's episode holds the turns of every seat the policy played (`Turn.player`) and
    `player_success` (each of those seats: did it win); `split_players` makes one trajectory per seat of
    it (`player` set), which trains as a trajectory of its own.
    """

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
    player: str = ""
    player_success: dict[str, bool] = field(default_factory=dict)

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
    action_is_refused: bool | msgspec.UnsetType = msgspec.UNSET  # required from version 2 (`_TURN_ADDED`)
    observation: Text | msgspec.UnsetType = msgspec.UNSET  # required from version 2
    player: Name | msgspec.UnsetType = msgspec.UNSET  # required from version 3


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
    player: Name | msgspec.UnsetType = msgspec.UNSET  # required from version 3 (`_TRAJECTORY_ADDED`)
    player_success: dict[Name, bool] | msgspec.UnsetType = msgspec.UNSET  # required from version 3


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
    _check_added_fields(body, _TRAJECTORY_ADDED, decoded.version, "trajectory")
    turns = []
    for i, t in enumerate(body.turns):
        if len(t.log_probs) != len(t.response_ids):
            raise PayloadError(
                f"trajectory.turns[{i}]: {len(t.log_probs)} log_probs for {len(t.response_ids)} response "
                "ids; they must have the same length (one log-prob per sampled token)"
            )
        _check_added_fields(t, _TURN_ADDED, decoded.version, f"trajectory.turns[{i}]")
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
                _or(t.player, ""),
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
        _or(body.player, ""),
        _or(body.player_success, {}),
    )


def _or(value: Any, default: Any) -> Any:
    """`value`, or `default` for a field an older payload has not (`msgspec.UNSET`)."""
    return default if value is msgspec.UNSET else value


def _check_added_fields(struct: Any, added: dict[str, int], version: int, where: str) -> None:
    """A field is present exactly in the versions from the one that added it."""
    for name, since in added.items():
        unset = getattr(struct, name) is msgspec.UNSET
        if unset != (version < since):
            state = "has no field" if unset else "has an unknown field"
            raise PayloadError(
                f"{where}: {state} {name} for schema version {version} (payloads carry it from version "
                f"{since} on). The payload breaks the trajectory schema: fix the code that built it (only "
                "encode values the dataclass types allow)"
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
            f"{SCHEMA_VERSION}, or one of {READ_VERSIONS} for older payloads); producer and "
            "consumer run different roll-rollout versions: install the same version on both"
        )
    if not len(envelope.trajectory):
        raise PayloadError(
            "trajectory payload has no 'trajectory' body: it was not made by encode_trajectory"
        )
    decode_typed(_BODY, envelope.trajectory, "trajectory")
    raise PayloadError("trajectory payload is malformed")  # not reached: the body decode raised


def prefix_digest(turns: Sequence[Turn]) -> str:
    """A digest of what `turns` played: each turn's observation, response ids and policy version."""
    digest = hashlib.blake2b(digest_size=16)
    for turn in turns:
        digest.update(msgpack.packb([turn.observation, turn.response_ids, turn.policy_version]))
    return digest.hexdigest()
