from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_rollout import PayloadError, Trajectory, Turn, decode_trajectory, encode_trajectory, stable_hash
from roll_rollout.schema import SCHEMA_NAME


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


def test_field_type_and_length_checks():
    body = msgpack.unpackb(encode_trajectory(make_traj()))
    body["trajectory"]["seed"] = "nope"
    with pytest.raises(PayloadError, match=r"trajectory\.seed: expected int"):
        decode_trajectory(msgpack.packb(body))
    body = msgpack.unpackb(encode_trajectory(make_traj()))
    body["trajectory"]["turns"][0]["log_probs"] = [0.0]
    with pytest.raises(PayloadError, match="same length"):
        decode_trajectory(msgpack.packb(body))
    body = msgpack.unpackb(encode_trajectory(make_traj()))
    del body["trajectory"]["turns"][1]["reward"]
    body["trajectory"]["turns"][1]["extra"] = 1
    with pytest.raises(PayloadError, match="missing fields"):
        decode_trajectory(msgpack.packb(body))
    assert msgpack.unpackb(encode_trajectory(make_traj()))["schema"] == SCHEMA_NAME


def test_stable_hash_is_deterministic_and_signed_64bit():
    assert stable_hash("abc") == stable_hash("abc")
    assert stable_hash("abc") != stable_hash("abd")
    values = [stable_hash(str(i)) for i in range(1000)]
    assert all(-(2**63) <= v < 2**63 for v in values)
    assert any(v < 0 for v in values)
