"""Trajectory payloads: decoding and encoding speed, and the long fuzz profile (pytest-benchmark).

A rollout step decodes one payload per trajectory; the reference load is 512 trajectories of 10 turns
(256 prompt ids and 32 response ids per turn). Compared, on the same payloads:

- `typed`: `decode_trajectory` (msgspec typed structs, every element checked);
- `legacy`: the previous decoder (msgpack + container-level checks only), kept here verbatim;
- `unpack_only`: `msgpack.unpackb` with no check at all (the floor);
- `python_checks` / `pydantic`: the two alternatives weighed against msgspec, each checking the
  element rules the typed decoder checks.

    uv run pytest benchmarks/test_bench_payloads.py --benchmark-enable --benchmark-columns=min,median,mean

The long fuzz profile (`test_long_fuzz_profile`) runs only with `--benchmark-enable`: 25,000 inputs of
each kind through the checks of `packages/roll-rollout/tests/test_payload_fuzz.py`.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict
from typing import Annotated, Any

import msgpack
import pytest
from package_tests import load_test_module
from roll_rollout import Trajectory, Turn, decode_trajectory, encode_trajectory

NUM_TRAJ, NUM_TURNS, PROMPT, RESPONSE = 512, 10, 256, 32
LONG_FUZZ_EXAMPLES = 25_000


def make_trajectory(seed: int, prompt: int = PROMPT, response: int = RESPONSE) -> Trajectory:
    """A FrozenLake-like trajectory with realistic token ids (vocabulary of 150k)."""
    rng = random.Random(seed)
    turns = [
        Turn(
            [rng.randrange(150_000) for _ in range(prompt)],
            [rng.randrange(150_000) for _ in range(response)],
            [-5 * rng.random() for _ in range(response)],
            rng.choice((0.0, -0.1, 1.0)),
            True,
            rng.random() < 0.8,
            "_ _ P _\n_ O _ _\n_ _ _ G\n_ _ _ _",
            3,
            "stop",
            "<answer>Left</answer>",
            observation="_ _ P _\n_ O _ _\n_ _ _ G\n_ _ _ _",  # what the model saw (here the state key too)
        )
        for _ in range(NUM_TURNS)
    ]
    metrics = {"success": 1.0, "num_actions": 10.0, "score": 1.0}
    return Trajectory(seed, seed // 8, seed, "FrozenLake", 123, turns, True, True, False, metrics)


@pytest.fixture(scope="module")
def trajectories() -> list[Trajectory]:
    return [make_trajectory(i) for i in range(NUM_TRAJ)]


@pytest.fixture(scope="module")
def payloads(trajectories) -> list[bytes]:
    return [encode_trajectory(t) for t in trajectories]


# ---- the previous decoder (container-level checks only), for comparison -------------------------

_LEGACY_TURN = {
    "prompt_ids": (list,), "response_ids": (list,), "log_probs": (list,), "reward": (float, int),
    "action_is_valid": (bool,), "action_is_effective": (bool,), "state_key": (str,),
    "policy_version": (int,), "finish_reason": (str,), "response_text": (str,), "action_is_refused": (bool,),
    "observation": (str,), "player": (str,),
}  # fmt: skip
_LEGACY_TRAJ = {
    "env_id": (int,), "group_id": (int,), "episode_id": (int,), "tag": (str,), "seed": (int,),
    "turns": (list,), "success": (bool,), "terminated": (bool,), "truncated": (bool,),
    "metrics": (dict,), "error": (str, type(None)), "player": (str,), "player_success": (dict,),
}  # fmt: skip


def _legacy_fields(obj: Any, types: dict[str, tuple[type, ...]]) -> None:
    if not isinstance(obj, dict) or set(obj) != set(types):
        raise ValueError("fields")
    for name, allowed in types.items():
        if not isinstance(obj[name], allowed):
            raise ValueError(name)


def legacy_decode(payload: bytes) -> Trajectory:
    msg = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    if not isinstance(msg, dict) or msg.get("schema") != "roll.trajectory" or msg.get("version") != 3:
        raise ValueError("schema")
    body = msg["trajectory"]
    _legacy_fields(body, _LEGACY_TRAJ)
    turns = []
    for raw in body["turns"]:
        _legacy_fields(raw, _LEGACY_TURN)
        if len(raw["log_probs"]) != len(raw["response_ids"]):
            raise ValueError("length")
        turns.append(Turn(**raw))
    return Trajectory(**{**body, "turns": turns})


# ---- the alternatives to msgspec ---------------------------------------------------------------------


def python_checks_decode(payload: bytes) -> Trajectory:
    """The legacy decoder plus element checks written in Python (ids, log-probs, reward, metrics)."""
    traj = legacy_decode(payload)
    for t in traj.turns:
        for ids in (t.prompt_ids, t.response_ids):
            for i in ids:
                if type(i) is not int or not 0 <= i < 2**31:
                    raise ValueError("token id")
        for x in t.log_probs:
            if type(x) is not float or not (-math.inf < x <= 0):
                raise ValueError("log-prob")
        if not math.isfinite(t.reward):
            raise ValueError("reward")
    if not all(math.isfinite(v) for v in traj.metrics.values()):
        raise ValueError("metric")
    return traj


def _pydantic_model() -> Any:
    from pydantic import BaseModel, ConfigDict, Field

    token = Annotated[int, Field(ge=0, lt=2**31)]
    finite = Annotated[float, Field(allow_inf_nan=False)]

    class PTurn(BaseModel):
        model_config = ConfigDict(strict=True, extra="forbid")
        prompt_ids: list[token]
        response_ids: list[token]
        log_probs: list[Annotated[float, Field(le=0, allow_inf_nan=False)]]
        reward: finite
        action_is_valid: bool
        action_is_effective: bool
        state_key: Annotated[str, Field(max_length=1 << 20)]
        policy_version: Annotated[int, Field(ge=0)]
        finish_reason: Annotated[str, Field(max_length=256)]
        response_text: Annotated[str, Field(max_length=1 << 20)]
        action_is_refused: bool
        observation: Annotated[str, Field(max_length=1 << 20)]
        player: Annotated[str, Field(max_length=256)]

    class PTraj(BaseModel):
        model_config = ConfigDict(strict=True, extra="forbid")
        env_id: int
        group_id: int
        episode_id: int
        tag: str
        seed: int
        turns: list[PTurn]
        success: bool
        terminated: bool
        truncated: bool
        metrics: dict[str, finite]
        error: str | None
        player: Annotated[str, Field(max_length=256)]
        player_success: dict[str, bool]

    return PTraj


# ---- benchmarks --------------------------------------------------------------------------------------


def test_bench_decode_typed(benchmark, payloads, trajectories):
    out = benchmark(lambda: [decode_trajectory(p) for p in payloads])
    assert out == trajectories


def test_bench_decode_legacy(benchmark, payloads, trajectories):
    out = benchmark(lambda: [legacy_decode(p) for p in payloads])
    assert out == trajectories


def test_bench_decode_unpack_only(benchmark, payloads, trajectories):
    out = benchmark(lambda: [msgpack.unpackb(p, raw=False) for p in payloads])
    assert out[0]["trajectory"] == asdict(trajectories[0])


def test_bench_decode_python_checks(benchmark, payloads, trajectories):
    out = benchmark(lambda: [python_checks_decode(p) for p in payloads])
    assert out == trajectories


def test_bench_decode_pydantic(benchmark, payloads, trajectories):
    model = _pydantic_model()
    out = benchmark(lambda: [model.model_validate(msgpack.unpackb(p)["trajectory"]) for p in payloads])
    assert out[0].model_dump() == asdict(trajectories[0])


def test_bench_encode_typed(benchmark, payloads, trajectories):
    assert benchmark(lambda: [encode_trajectory(t) for t in trajectories]) == payloads


def test_bench_encode_legacy(benchmark, payloads, trajectories):
    def legacy() -> list[bytes]:
        return [
            msgpack.packb({"schema": "roll.trajectory", "version": 3, "trajectory": asdict(t)})
            for t in trajectories
        ]

    assert benchmark.pedantic(legacy, rounds=3, iterations=1) == payloads


def test_decoders_side_by_side(benchmark, payloads):
    """The decoders in turn, 30 rounds, CPU time of this process: robust to the load of a shared machine
    (each round meets the same load). Prints min and median per decoder (the table in docs/benchmarks.md)."""
    if benchmark.disabled:
        pytest.skip("a measurement: runs with --benchmark-enable")
    model = _pydantic_model()
    decoders = {
        "typed (decode_trajectory)": lambda: [decode_trajectory(p) for p in payloads],
        "legacy (containers only)": lambda: [legacy_decode(p) for p in payloads],
        "unpack only (no checks)": lambda: [msgpack.unpackb(p, raw=False) for p in payloads],
        "python checks": lambda: [python_checks_decode(p) for p in payloads],
        "pydantic": lambda: [model.model_validate(msgpack.unpackb(p)["trajectory"]) for p in payloads],
    }
    times: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(30):
        for name, decode in decoders.items():
            start = time.process_time()
            decode()
            times[name].append(time.process_time() - start)
    print(f"\n{NUM_TRAJ} trajectories x {NUM_TURNS} turns, CPU ms | min | median |")
    for name, values in times.items():
        print(f"| {name} | {min(values) * 1e3:.1f} | {statistics.median(values) * 1e3:.1f} |")
    benchmark.pedantic(decoders["typed (decode_trajectory)"], rounds=1, iterations=1)


def test_long_fuzz_profile(benchmark):
    """25,000 inputs of each kind (random bytes, truncations, bit flips, mutations), fixed seed."""
    if benchmark.disabled:
        pytest.skip("the long fuzz profile runs with --benchmark-enable")
    from hypothesis import given, settings

    fuzz = load_test_module("packages/roll-rollout/tests/test_payload_fuzz.py", "roll_payload_fuzz")
    long_profile = settings(fuzz.CI, max_examples=LONG_FUZZ_EXAMPLES)
    counts = {"decoded": 0, "rejected": 0}

    def run_all() -> None:
        for strategy in fuzz.FUZZ_KINDS.values():

            @long_profile
            @given(strategy)
            def run(payload: bytes) -> None:
                counts["decoded" if fuzz.check_payload(payload) else "rejected"] += 1

            run()

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    print(f"\nlong fuzz profile: {counts} (hypothesis also counts its shrinking replays)")
    assert counts["decoded"] > 0 and counts["rejected"] > 0
