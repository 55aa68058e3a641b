from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_rollout import PayloadError, Trajectory, Turn, decode_trajectory, encode_trajectory, stable_hash
from roll_rollout.schema import SCHEMA_NAME, SCHEMA_VERSION
from roll_rollout.wire import MAX_NAME_CHARS, MAX_TEXT_CHARS, MAX_TOKEN_ID


def make_traj(n_turns: int = 2) -> Trajectory:
    turns = [
        Turn(
            [1, 2, 3],
            [4, 5],
            [-0.5, -0.25],
            reward=float(k),
            action_is_valid=True,
            action_is_effective=k > 0,
            state_key=f"grid{k}",
            policy_version=3,
            finish_reason="stop",
            response_text="<answer>Left</answer>",
        )
        for k in range(n_turns)
    ]
    return Trajectory(
        7, 1, 99, "FrozenLake", 123, turns, success=True, terminated=True, metrics={"success": 1.0}
    )


def test_round_trip_keeps_everything():
    traj = make_traj()
    back = decode_trajectory(encode_trajectory(traj))
    assert back == traj
    assert back.score == 1.0
    assert back.num_response_tokens == 4


@settings(max_examples=50, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 2**31 - 1), max_size=50),
    response=st.lists(st.integers(0, 2**31 - 1), max_size=20),
    reward=st.floats(allow_nan=False, allow_infinity=False),
    key=st.text(max_size=40),
)
def test_round_trip_random(prompt, response, reward, key):
    turn = Turn(prompt, response, [0.0] * len(response), reward, False, False, key)
    traj = Trajectory(0, 0, 0, "t", 5, [turn])
    assert decode_trajectory(encode_trajectory(traj)) == traj


@pytest.mark.parametrize(
    "payload", [b"", b"\xc1\xc1garbage", b"\x93\x01\x02\x03", msgpack.packb({"schema": "other"})]
)
def test_garbage_and_foreign_payloads_are_clear_errors(payload):
    with pytest.raises(PayloadError):
        decode_trajectory(payload)


def test_wrong_version_says_what_to_do():
    body = msgpack.unpackb(encode_trajectory(make_traj()))
    body["version"] = 999
    with pytest.raises(PayloadError, match="same version"):
        decode_trajectory(msgpack.packb(body))


def _body() -> dict:
    return msgpack.unpackb(encode_trajectory(make_traj()))


def test_encoding_is_the_msgpack_of_the_dataclasses():
    """The wire format is unchanged: the msgpack of `asdict`, as the previous encoder wrote it."""
    traj = make_traj(3)
    expected = msgpack.packb(
        {"schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "trajectory": dataclasses.asdict(traj)}
    )
    assert encode_trajectory(traj) == expected


def set_at(body: dict, path: str, value) -> dict:
    node = body["trajectory"]
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return body


# Twelve wrongly typed payloads that a decoder checking only the containers would accept.
BAD_FIELDS = [
    ("turns.0.prompt_ids.1", "x", r"trajectory\.turns\[0\]\.prompt_ids\[1\]: expected int, got str"),
    ("turns.0.response_ids.0", 4.0, r"trajectory\.turns\[0\]\.response_ids\[0\]: expected int, got float"),
    (
        "turns.1.prompt_ids.0",
        2**63,
        r"prompt_ids\[0\]: expected int <= 2147483647 \(value: 9223372036854775808\)",
    ),
    ("turns.1.response_ids.1", -1, r"response_ids\[1\]: expected int >= 0 \(value: -1\); token ids"),
    ("turns.0.log_probs.0", "low", r"log_probs\[0\]: expected float, got str"),
    ("turns.0.reward", float("nan"), r"turns\[0\]\.reward: expected a finite float \(value: nan\)"),
    ("turns.1.log_probs.1", float("-inf"), r"log_probs\[1\]: expected a finite float \(value: -inf\)"),
    ("env_id", True, r"trajectory\.env_id: expected int, got bool"),
    ("turns.0.policy_version", True, r"policy_version: expected int, got bool"),
    ("metrics.success", "yes", r"trajectory\.metrics\[\.\.\.\]: expected float, got str"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_FIELDS)
def test_wrongly_typed_fields_name_the_field(path, value, message):
    with pytest.raises(PayloadError, match=message):
        decode_trajectory(msgpack.packb(set_at(_body(), path, value)))


@pytest.mark.parametrize("version", [3.0, True, "3", None, 0, 4])
def test_version_must_be_the_exact_int(version):
    body = _body()
    body["version"] = version
    with pytest.raises(PayloadError, match=r"expected the int 3, or one of \(1, 2, 3\) for older payloads"):
        decode_trajectory(msgpack.packb(body))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("turns.0.log_probs.0", 0.5, r"log_probs\[0\]: expected float <= 0.0 \(value: 0.5\)"),
        ("turns.0.reward", float("inf"), r"reward: expected a finite float \(value: inf\)"),
        ("metrics.success", float("nan"), r"metrics\[\.\.\.\]: expected a finite float; metrics map"),
        ("turns.0.action_is_valid", 1, "action_is_valid: expected bool, got int"),
        ("success", 0, "success: expected bool, got int"),
        ("seed", -5, r"seed: expected int >= 0 \(value: -5\)"),
        ("group_id", 2**64 - 1, r"group_id: expected int <= 9223372036854775807"),
        ("tag", "t" * (MAX_NAME_CHARS + 1), "tag: expected str of length <= 256"),
        ("turns.0.finish_reason", "s" * (MAX_NAME_CHARS + 1), "finish_reason: expected str of length <= 256"),
        ("error", b"bytes are not str", r"error: expected str \| null, got bytes"),
        ("turns", {"0": 1}, "turns: expected array, got object"),
    ],
)
def test_ranges_and_strict_types(path, value, message):
    with pytest.raises(PayloadError, match=message):
        decode_trajectory(msgpack.packb(set_at(_body(), path, value)))


def test_boundary_values_are_accepted_with_exact_types():
    traj = make_traj(1)
    turn = traj.turns[0]
    turn.prompt_ids = [0, MAX_TOKEN_ID - 1]
    turn.log_probs = [0.0, -1e308]
    traj.tag = "t" * MAX_NAME_CHARS
    traj.seed = 2**63 - 1
    back = decode_trajectory(encode_trajectory(traj))
    assert back == traj
    body = _body()
    body["trajectory"]["turns"][0]["reward"] = 3  # an int reward is read as the float 3.0
    back = decode_trajectory(msgpack.packb(body))
    assert type(back.turns[0].reward) is float and back.turns[0].reward == 3.0


def test_unknown_missing_and_mismatched_fields():
    body = _body()
    body["trajectory"]["turns"][0]["log_probs"] = [0.0]
    with pytest.raises(PayloadError, match=r"turns\[0\]: 1 log_probs for 2 response ids"):
        decode_trajectory(msgpack.packb(body))
    body = _body()
    del body["trajectory"]["turns"][1]["reward"]
    with pytest.raises(PayloadError, match=r"trajectory\.turns\[1\]: object missing required field reward"):
        decode_trajectory(msgpack.packb(body))
    body = _body()
    body["trajectory"]["turns"][1]["extra"] = 1
    with pytest.raises(PayloadError, match=r"trajectory\.turns\[1\]: object contains unknown field extra"):
        decode_trajectory(msgpack.packb(body))
    body = _body()
    body["sidecar"] = 1
    with pytest.raises(PayloadError, match="unknown field sidecar"):
        decode_trajectory(msgpack.packb(body))
    del body["sidecar"], body["trajectory"]
    with pytest.raises(PayloadError, match="no 'trajectory' body"):
        decode_trajectory(msgpack.packb(body))
    with pytest.raises(PayloadError, match="must be bytes"):
        decode_trajectory("not bytes")


def test_an_over_long_error_is_clipped_when_encoded():
    traj = make_traj(1)
    traj.error = "boom " * MAX_TEXT_CHARS
    back = decode_trajectory(encode_trajectory(traj))
    assert len(back.error) == MAX_TEXT_CHARS and back.error.startswith("boom boom")
    assert back.error.endswith("clipped to fit the trajectory schema]")
    assert len(traj.error) == 5 * MAX_TEXT_CHARS  # the caller's trajectory is left as it was
    traj.turns[0].state_key = "s" * (MAX_TEXT_CHARS + 1)  # other text is not clipped: a schema error
    with pytest.raises(PayloadError, match=r"state_key: expected str of length <= 1048576"):
        decode_trajectory(encode_trajectory(traj))


def test_stable_hash_is_deterministic_and_signed_64bit():
    assert stable_hash("abc") == stable_hash("abc")
    assert stable_hash("abc") != stable_hash("abd")
    values = [stable_hash(str(i)) for i in range(1000)]
    assert all(-(2**63) <= v < 2**63 for v in values)
    assert any(v < 0 for v in values)


def test_stable_hash_is_pinned():
    # blake2b, not Python's salted hash(): the same value in every process, run and roll version
    assert stable_hash("abc") == 6455300059550759896
    assert Turn([1], [2], [-0.1], 0.0, True, True, "abc").anchor_id == stable_hash("abc")


def test_turns_carry_action_is_refused():
    traj = make_traj(3)
    traj.turns[1].action_is_refused = True
    back = decode_trajectory(encode_trajectory(traj))
    assert [t.action_is_refused for t in back.turns] == [False, True, False]
    assert msgpack.unpackb(encode_trajectory(traj))["trajectory"]["turns"][1]["action_is_refused"] is True


V1_TURN = {
    "prompt_ids": [1, 2],
    "response_ids": [3],
    "log_probs": [-0.5],
    "reward": 1.0,
    "action_is_valid": True,
    "action_is_effective": False,
    "state_key": "s",
    "policy_version": 4,
    "finish_reason": "stop",
    "response_text": "<answer>Up</answer>",
}
"""A turn as roll-rollout wrote it before `Turn.action_is_refused` (schema version 1), written out by hand."""

V1_BODY = {
    "env_id": 0,
    "group_id": 1,
    "episode_id": 2,
    "tag": "FrozenLake",
    "seed": 3,
    "turns": [V1_TURN],
    "success": False,
    "terminated": False,
    "truncated": True,
    "metrics": {"success": 0.0},
    "error": None,
}


def test_version_1_payloads_still_decode_with_no_turn_refused():
    back = decode_trajectory(msgpack.packb({"schema": SCHEMA_NAME, "version": 1, "trajectory": V1_BODY}))
    expected = Turn([1, 2], [3], [-0.5], 1.0, True, False, "s", 4, "stop", "<answer>Up</answer>", False, "s")
    assert back.turns == [expected] and back.truncated and back.metrics == {"success": 0.0}
    assert back.turns[0].observation == "s"  # version 1 recorded the observation as the state key


@pytest.mark.parametrize(
    ("version", "refused", "message"),
    [
        (2, None, r"turns\[0\]: has no field action_is_refused for schema version 2"),
        (1, False, r"turns\[0\]: has an unknown field action_is_refused for schema version 1"),
        (2, 1, r"turns\[0\]\.action_is_refused: expected bool, got int"),
    ],
)
def test_action_is_refused_is_required_in_version_2_only(version, refused, message):
    turn = dict(V1_TURN) if refused is None else {**V1_TURN, "action_is_refused": refused}
    if version == 2:
        turn["observation"] = "s"
    body = {**V1_BODY, "turns": [turn]}
    with pytest.raises(PayloadError, match=message):
        decode_trajectory(msgpack.packb({"schema": SCHEMA_NAME, "version": version, "trajectory": body}))


def test_turns_carry_their_observation_apart_from_the_state_key():
    traj = make_traj(2)
    traj.turns[0].observation = "moves so far: none\ngrid0"  # the observation carries more than the state
    back = decode_trajectory(encode_trajectory(traj))
    assert back.turns[0].observation == "moves so far: none\ngrid0" and back.turns[0].state_key == "grid0"
    assert back.turns[0].anchor_id == stable_hash("grid0")


@pytest.mark.parametrize(
    ("version", "observation", "message"),
    [
        (2, None, r"turns\[0\]: has no field observation for schema version 2"),
        (1, "s", r"turns\[0\]: has an unknown field observation for schema version 1"),
        (2, 3, r"turns\[0\]\.observation: expected str, got int"),
    ],
)
def test_observation_is_required_in_version_2_only(version, observation, message):
    turn = {**V1_TURN, "action_is_refused": False} if version == 2 else dict(V1_TURN)
    if observation is not None:
        turn["observation"] = observation
    body = {**V1_BODY, "turns": [turn]}
    with pytest.raises(PayloadError, match=message):
        decode_trajectory(msgpack.packb({"schema": SCHEMA_NAME, "version": version, "trajectory": body}))
