"""Typed decoding of the policy's request and result payloads: types, ranges, field paths."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_rollout import GenerateRequest, GenerateResult, PayloadError, SamplingSettings
from roll_rollout.policies.policy import decode_request, decode_result, encode_request, encode_result


def _request() -> dict:
    req = GenerateRequest([1, 2, 3], SamplingSettings(max_new_tokens=4, temperature=0.7, top_p=0.9, top_k=5))
    return msgpack.unpackb(encode_request(req))


def _result() -> dict:
    return msgpack.unpackb(encode_result(GenerateResult([5, 6], [-1.0, -2.0], "length", 7)))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prompt_ids", [1, "2"], r"generate request\.prompt_ids\[1\]: expected int, got str"),
        ("prompt_ids", [2**31], r"prompt_ids\[0\]: expected int <= 2147483647 \(value: 2147483648\)"),
        ("max_new_tokens", 0, r"sampling\.max_new_tokens: expected int >= 1 \(value: 0\)"),
        ("max_new_tokens", True, r"sampling\.max_new_tokens: expected int, got bool"),
        ("temperature", 0.0, r"sampling\.temperature: expected float > 0\.0.*greedy=True"),
        ("temperature", float("nan"), r"sampling\.temperature: expected float > 0\.0 \(value: nan\)"),
        (
            "top_p",
            1.5,
            r"sampling\.top_p: expected float <= 1\.0 \(value: 1\.5\); top_p is a float in \(0, 1\]",
        ),
        ("top_k", -1, r"sampling\.top_k: expected int >= 0"),
        ("greedy", 1, r"sampling\.greedy: expected bool, got int"),
    ],
)
def test_bad_requests_name_the_field(field, value, message):
    msg = _request()
    (msg if field == "prompt_ids" else msg["sampling"])[field] = value
    with pytest.raises(PayloadError, match=message):
        decode_request(msgpack.packb(msg))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("output_ids", [5, -6], r"generate result\.output_ids\[1\]: expected int >= 0 \(value: -6\)"),
        ("output_ids", [5, 6.0], r"output_ids\[1\]: expected int, got float"),
        ("log_probs", [-1.0, 0.1], r"log_probs\[1\]: expected float <= 0\.0 \(value: 0\.1\)"),
        ("log_probs", [-1.0, float("-inf")], r"log_probs\[1\]: expected a finite float \(value: -inf\)"),
        ("log_probs", [-1.0], r"1 log_probs for 2 output ids"),
        ("finish_reason", None, r"finish_reason: expected str, got None"),
        ("policy_version", True, r"policy_version: expected int, got bool"),
        ("policy_version", -1, r"policy_version: expected int >= 0"),
    ],
)
def test_bad_results_name_the_field(field, value, message):
    msg = _result()
    msg[field] = value
    with pytest.raises(PayloadError, match=message):
        decode_result(msgpack.packb(msg))


def test_unknown_and_missing_fields_and_garbage():
    msg = _result()
    msg["extra"] = 1
    with pytest.raises(PayloadError, match="unknown field extra"):
        decode_result(msgpack.packb(msg))
    msg = _request()
    del msg["sampling"]["greedy"]
    with pytest.raises(
        PayloadError, match=r"generate request\.sampling: object missing required field greedy"
    ):
        decode_request(msgpack.packb(msg))
    for garbage in (b"", b"\xc1", b"\x92\x01", b"\xa2\xff\xfe"):
        with pytest.raises(PayloadError, match="generate result"):
            decode_result(garbage)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    ids=st.lists(st.integers(0, 2**31 - 1), max_size=8),
    lps=st.lists(st.floats(max_value=0.0, allow_nan=False, allow_infinity=False), max_size=8),
    version=st.integers(0, 2**63 - 1),
    reason=st.text(max_size=20),
)
def test_valid_results_round_trip_with_exact_types(ids, lps, version, reason):
    lps = (lps + [0.0] * len(ids))[: len(ids)]
    back = decode_result(encode_result(GenerateResult(ids, lps, reason, version)))
    assert back == GenerateResult(ids, lps, reason, version)
    assert all(type(i) is int for i in back.output_ids)
    assert all(type(x) is float and math.isfinite(x) for x in back.log_probs)
    assert type(back.policy_version) is int and type(back.finish_reason) is str
