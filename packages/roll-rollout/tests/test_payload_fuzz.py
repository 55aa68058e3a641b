"""Fuzzing `decode_trajectory` (fixed seed): random bytes, truncations, bit flips and field mutations.

Every input must either raise `PayloadError` or decode to a trajectory whose fields all have their
exact schema types and ranges. Each outcome is also checked against `reference_accepts`, a plain
Python statement of the schema written independently of the msgspec structs: a payload decodes if and
only if the reference accepts it, and then decodes to exactly the values the reference read.

The CI profile runs 4 x 2,500 = 10,000 inputs; `benchmarks/test_bench_payloads.py` runs a longer one
with the same strategies and checks.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from roll_rollout import PayloadError, Trajectory, Turn, decode_trajectory, encode_trajectory

EXAMPLES_PER_KIND = 2_500
"""Inputs per fuzz test in the default run (four tests: 10,000 inputs)."""

CI = settings(
    max_examples=EXAMPLES_PER_KIND,
    derandomize=True,  # a fixed seed: the same inputs on every run
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TOKEN_END, INT64_MAX, NAME_MAX, TEXT_MAX = 2**31, 2**63 - 1, 256, 1 << 20

TURN_FIELDS = (
    "prompt_ids",
    "response_ids",
    "log_probs",
    "reward",
    "action_is_valid",
    "action_is_effective",
    "state_key",
    "policy_version",
    "finish_reason",
    "response_text",
)
"""A turn's fields in schema version 1; version 2 adds `action_is_refused` and `observation`, 3 `player`."""
TRAJ_FIELDS = (
    "env_id",
    "group_id",
    "episode_id",
    "tag",
    "seed",
    "turns",
    "success",
    "terminated",
    "truncated",
    "metrics",
    "error",
)


# ---- the reference: the schema as plain Python ------------------------------------------------------


def _count(x: Any) -> bool:
    return type(x) is int and 0 <= x <= INT64_MAX


def _number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def _text(x: Any, limit: int) -> bool:
    return type(x) is str and len(x) <= limit


def _turn_ok(t: Any, version: int) -> bool:
    fields = set(TURN_FIELDS) | ({"action_is_refused", "observation"} if version >= 2 else set())
    fields |= {"player"} if version >= 3 else set()
    if type(t) is not dict or set(t) != fields:
        return False
    if version >= 2 and (type(t["action_is_refused"]) is not bool or not _text(t["observation"], TEXT_MAX)):
        return False
    if version >= 3 and not _text(t["player"], NAME_MAX):
        return False
    ids_ok = all(
        type(ids) is list and all(type(i) is int and 0 <= i < TOKEN_END for i in ids)
        for ids in (t["prompt_ids"], t["response_ids"])
    )
    lps = t["log_probs"]
    return (
        ids_ok
        and type(lps) is list
        and all(_number(x) and x <= 0 for x in lps)
        and len(lps) == len(t["response_ids"])
        and _number(t["reward"])
        and type(t["action_is_valid"]) is bool
        and type(t["action_is_effective"]) is bool
        and _text(t["state_key"], TEXT_MAX)
        and _count(t["policy_version"])
        and _text(t["finish_reason"], NAME_MAX)
        and _text(t["response_text"], TEXT_MAX)
    )


def reference_accepts(payload: bytes) -> bool:
    """Whether `payload` is a valid version 1, 2 or 3 trajectory payload, judged without msgspec."""
    try:
        msg = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:
        return False
    if type(msg) is not dict or set(msg) != {"schema", "version", "trajectory"}:
        return False
    if (
        msg["schema"] != "roll.trajectory"
        or type(msg["version"]) is not int
        or msg["version"] not in (1, 2, 3)
    ):
        return False
    b = msg["trajectory"]
    added = {"player", "player_success"} if msg["version"] >= 3 else set()
    if type(b) is not dict or set(b) != set(TRAJ_FIELDS) | added:
        return False
    if added and not (
        _text(b["player"], NAME_MAX)
        and type(b["player_success"]) is dict
        and all(_text(k, NAME_MAX) and type(v) is bool for k, v in b["player_success"].items())
    ):
        return False
    metrics = b["metrics"]
    return (
        all(_count(b[k]) for k in ("env_id", "group_id", "episode_id", "seed"))
        and _text(b["tag"], NAME_MAX)
        and type(b["turns"]) is list
        and all(_turn_ok(t, msg["version"]) for t in b["turns"])
        and all(type(b[k]) is bool for k in ("success", "terminated", "truncated"))
        and type(metrics) is dict
        and all(_text(k, NAME_MAX) and _number(v) for k, v in metrics.items())
        and (b["error"] is None or _text(b["error"], TEXT_MAX))
    )


def assert_exact_types(traj: Trajectory) -> None:
    """Every field of a decoded trajectory has its exact schema type (bool is not int, int is not float)."""
    assert type(traj) is Trajectory
    for name in ("env_id", "group_id", "episode_id", "seed"):
        assert _count(getattr(traj, name)), name
    assert _text(traj.tag, NAME_MAX)
    assert all(type(getattr(traj, k)) is bool for k in ("success", "terminated", "truncated"))
    assert type(traj.metrics) is dict
    assert all(_text(k, NAME_MAX) and type(v) is float and math.isfinite(v) for k, v in traj.metrics.items())
    assert traj.error is None or _text(traj.error, TEXT_MAX)
    assert _text(traj.player, NAME_MAX) and type(traj.player_success) is dict
    assert all(_text(k, NAME_MAX) and type(v) is bool for k, v in traj.player_success.items())
    assert type(traj.turns) is list
    for t in traj.turns:
        assert type(t) is Turn
        for ids in (t.prompt_ids, t.response_ids):
            assert type(ids) is list and all(type(i) is int and 0 <= i < TOKEN_END for i in ids)
        assert type(t.log_probs) is list and len(t.log_probs) == len(t.response_ids)
        assert all(type(x) is float and math.isfinite(x) and x <= 0 for x in t.log_probs)
        assert type(t.reward) is float and math.isfinite(t.reward)
        assert type(t.action_is_valid) is bool and type(t.action_is_effective) is bool
        assert (
            type(t.action_is_refused) is bool and _text(t.observation, TEXT_MAX) and _text(t.player, NAME_MAX)
        )
        assert _count(t.policy_version)
        assert _text(t.state_key, TEXT_MAX) and _text(t.response_text, TEXT_MAX)
        assert _text(t.finish_reason, NAME_MAX)


def _event(name: str) -> None:
    if currently_in_test_context():  # counts shown by --hypothesis-show-statistics
        event(name)


def check_payload(payload: bytes) -> bool:
    """Decode `payload`: PayloadError or exact types, as the reference says. Returns whether it decoded."""
    expected = reference_accepts(payload)
    try:
        traj = decode_trajectory(payload)
    except PayloadError:
        assert not expected, "the reference accepts a payload the decoder rejected"
        _event("rejected")
        return False
    _event("decoded")
    assert expected, f"decoded a payload the reference rejects: {payload[:120]!r}"
    assert_exact_types(traj)
    assert asdict(traj) == _with_floats(msgpack.unpackb(payload, raw=False)["trajectory"])
    return True


def _with_floats(body: dict[str, Any]) -> dict[str, Any]:
    """The reference's reading of a body: float fields hold floats (an int 3 is read as 3.0), and a version-1
    turn has `action_is_refused` False and its state key as `observation`; before version 3 there are no
    players ("" and {})."""
    body["metrics"] = {k: float(v) for k, v in body["metrics"].items()}
    body.setdefault("player", "")
    body.setdefault("player_success", {})
    for t in body["turns"]:
        t["reward"], t["log_probs"] = float(t["reward"]), [float(x) for x in t["log_probs"]]
        t.setdefault("action_is_refused", False)
        t.setdefault("observation", t["state_key"])
        t.setdefault("player", "")
    return body


# ---- inputs -------------------------------------------------------------------------------------------

_EDGE_FLOATS = (0.0, -0.0, -1e-300, -1e308, 1e308, 5e-324, 3.0)
_EDGE_TEXT = ("", "é", "💥", "a" * NAME_MAX, "line\nbreak", "\x00")


def random_trajectory(seed: int) -> Trajectory:
    """A valid trajectory drawn from `seed`, with edge values (0, 2**31 - 1, -0.0, huge floats, unicode)."""
    rng = random.Random(seed)

    def ids(n: int) -> list[int]:
        return [rng.choice((0, TOKEN_END - 1, rng.randrange(TOKEN_END))) for _ in range(n)]

    def text(limit: int = 12) -> str:
        return rng.choice((*_EDGE_TEXT, "".join(rng.choice("ab <>|/") for _ in range(rng.randrange(limit)))))

    def number() -> float:
        return rng.choice((*_EDGE_FLOATS, rng.uniform(-100, 100)))

    turns = []
    for _ in range(rng.randrange(4)):
        n = rng.randrange(5)
        turns.append(
            Turn(
                ids(rng.randrange(6)),
                ids(n),
                [-abs(number()) for _ in range(n)],
                number(),
                rng.random() < 0.5,
                rng.random() < 0.5,
                text(),
                rng.choice((0, 1, INT64_MAX)),
                rng.choice(("stop", "length", "")),
                text(),
                rng.random() < 0.5,
                text(),
            )
        )
    return Trajectory(
        rng.choice((0, 7, INT64_MAX)),
        rng.randrange(100),
        rng.randrange(10**6),
        text(),
        rng.choice((0, 2**32, INT64_MAX)),
        turns,
        rng.random() < 0.5,
        rng.random() < 0.5,
        rng.random() < 0.5,
        {text(): number() for _ in range(rng.randrange(3))},
        rng.choice((None, "", text())),
    )


valid_payloads = st.integers(0, 2**32 - 1).map(lambda s: encode_trajectory(random_trajectory(s)))


@st.composite
def truncated(draw: st.DrawFn) -> bytes:
    """A valid payload cut short (or extended by a byte: trailing data)."""
    payload = draw(valid_payloads)
    cut = draw(st.integers(0, len(payload)))
    return payload[:cut] if cut < len(payload) else payload + draw(st.binary(min_size=1, max_size=1))


@st.composite
def bit_flipped(draw: st.DrawFn) -> bytes:
    """A valid payload with one to three bits flipped."""
    data = bytearray(draw(valid_payloads))
    for _ in range(draw(st.integers(1, 3))):
        bit = draw(st.integers(0, 8 * len(data) - 1))
        data[bit // 8] ^= 1 << (bit % 8)
    return bytes(data)


REPLACEMENTS: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, TOKEN_END - 1, TOKEN_END, INT64_MAX, INT64_MAX + 1, 2**64 - 1, -(2**63),
    0.0, -0.0, 0.5, -1.5, 1e308, -1e308, float("nan"), float("inf"), float("-inf"),
    "", "x", "roll.trajectory", "n" * (NAME_MAX + 1), b"bytes", [], [0], [True], [1.0], ["x"], [-0.5],
    {}, {"k": 1.0}, {"k": "v"}, {1: 1.0},
)  # fmt: skip
"""Values a mutation puts in place of a field or element: wrong types, boundaries, out of range."""


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a decoded msgpack tree, containers included (the root excluded)."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out = []
    for key, child in children:
        out.append((*prefix, key))
        out += _paths(child, (*prefix, key))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid payload with one field or element replaced, deleted, or an unknown field added."""
    msg = msgpack.unpackb(draw(valid_payloads), raw=False)
    path = draw(st.sampled_from(_paths(msg)))
    parent = msg
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(("replace", "replace", "replace", "delete", "add")))
    if action == "replace":
        parent[path[-1]] = draw(st.sampled_from(REPLACEMENTS))
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.sampled_from(("extra", "reward", "Schema")))] = draw(st.sampled_from(REPLACEMENTS))
    else:
        parent.append(draw(st.sampled_from(REPLACEMENTS)))
    return msgpack.packb(msg)


FUZZ_KINDS = {
    "random_bytes": st.binary(max_size=600),
    "truncated": truncated(),
    "bit_flipped": bit_flipped(),
    "mutated": mutated(),
}
"""The input strategies, by name (the benchmark suite reuses them)."""


@pytest.mark.parametrize("kind", FUZZ_KINDS)
@CI
@given(data=st.data())
def test_damaged_payloads(kind, data):
    """Random bytes, truncations, bit flips, type and range mutations: each decodes or raises `PayloadError`."""
    check_payload(data.draw(FUZZ_KINDS[kind]))


def test_the_inputs_reach_both_outcomes():
    """The generators are not degenerate: valid payloads decode, and each kind of damage is caught."""
    assert all(check_payload(encode_trajectory(random_trajectory(seed))) for seed in range(50))
    payload = encode_trajectory(random_trajectory(3))
    assert not check_payload(payload[:-1]) and not check_payload(payload + b"\x00")
    msg = msgpack.unpackb(payload, raw=False)
    msg["trajectory"]["seed"] = True
    assert not check_payload(msgpack.packb(msg))
