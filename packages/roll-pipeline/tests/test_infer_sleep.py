"""A vllm actor_infer: the config's rules (recomputed old log-probs; sleep when colocated), and the order in
which the policy server streams, sleeps, wakes and loads weights, with a fake inference worker at the
`ActorInferWorker` seam (the real engine: tests/test_vllm_pipeline.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import roll_strategies
from roll_pipeline.config.colocation import InferSleep, infer_sleep
from roll_pipeline.config.compose import ConfigError, compose
from roll_pipeline.runtime.infer_sleep import InferSleeper
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_rollout import BatchingPolicy, GenerateRequest, SamplingSettings, StreamingPolicy
from roll_strategies import GenerationOutput

VLLM = ["actor_infer.strategy_args.strategy_name=vllm", "recompute_old_log_probs=true"]
ON_GPU0 = ["actor_train.device_mapping=[0]", "actor_infer.device_mapping=[0]"]


def test_vllm_needs_recomputed_old_log_probs():
    with pytest.raises(ConfigError, match="set recompute_old_log_probs=true") as err:
        compose(None, None, ["actor_infer.strategy_args.strategy_name=vllm", "recompute_old_log_probs=false"])
    assert "strategy_name=vllm" in str(err.value)
    assert compose(None, None, VLLM).recompute_old_log_probs


def test_the_engine_sleeps_only_on_gpus_it_shares():
    cfg = compose(None, None, [*VLLM, *ON_GPU0, "async_generation_ratio=0"])
    assert infer_sleep(_roles(cfg), ["actor_train", "actor_infer"]) == InferSleep(1, ("actor_train",))
    apart = compose(None, None, [*VLLM, "actor_train.device_mapping=[0]", "actor_infer.device_mapping=[1]"])
    assert not infer_sleep(_roles(apart), ["actor_train", "actor_infer"]).enabled
    on_cpu = compose(None, None, VLLM)  # nothing is colocated on the CPU: the async default stays allowed
    assert not infer_sleep(_roles(on_cpu), ["actor_train", "actor_infer"]).enabled
    level0 = [*VLLM, *ON_GPU0, "+actor_infer.strategy_args.strategy_config={sleep_level: 0}"]
    assert compose(None, None, level0).async_generation_ratio == 1  # an engine that never sleeps may overlap
    hf = compose(None, None, ON_GPU0)  # hf_infer is never put to sleep by the pipeline
    assert infer_sleep(_roles(hf), ["actor_train", "actor_infer"]) == InferSleep(0, ())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (ON_GPU0, "set async_generation_ratio=0"),
        (
            [
                *ON_GPU0,
                "async_generation_ratio=0",
                "model_update_frequency=2",
                "+actor_infer.strategy_args.strategy_config={sleep_level: 2}",
            ],
            "set model_update_frequency=1",
        ),
        (["+actor_infer.strategy_args.strategy_config={sleep_level: 3}"], r"sleep_level=3: expected one of"),
    ],
)
def test_sleep_settings_the_run_could_not_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(None, None, [*VLLM, *overrides])


def _roles(cfg: Any) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in ("actor_train", "actor_infer", "reference", "critic")}


class FakeWorker:
    """Stands in for `ActorInferWorker` at the policy server's seam: a continuously batching engine whose
    requests finish when `release` is called; every call is appended to `events`."""

    events: list[str]

    def __init__(self, model_path: Any, *, can_sleep: bool = True, **kwargs: Any) -> None:
        self.events = []
        self.can_sleep = can_sleep
        self.gate = asyncio.Event()
        self.version = 0

    def streams(self) -> bool:
        return True

    async def agenerate_one(self, prompt: list[int], params: Any, sample_key: int | None) -> GenerationOutput:
        self.events.append(f"start {prompt[0]} key {sample_key}")
        await self.gate.wait()
        self.events.append(f"end {prompt[0]}")
        return GenerationOutput([prompt[0] + 1], [-0.5], "stop")

    def sleep(self) -> bool:
        self.events.append("sleep" if self.can_sleep else "sleep refused")
        return self.can_sleep

    def sleep_unavailable(self) -> str | None:
        return None if self.can_sleep else "no sleep mode on this platform"

    def wake_up(self) -> None:
        self.events.append("wake_up")

    def weights_fingerprint(self) -> str:
        return "held"

    def confirm_weights(self, version: int, fingerprint: str) -> None:
        self.events.append(f"weights {version}")
        self.version = version

    def get_policy_version(self) -> int:
        return self.version


@pytest.fixture
def server(monkeypatch) -> PolicyServer:
    monkeypatch.setattr(roll_strategies, "ActorInferWorker", FakeWorker)
    return PolicyServer("unused-model-folder")


def _request(i: int) -> GenerateRequest:
    return GenerateRequest([i], SamplingSettings(max_new_tokens=4), sample_key=100 + i)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_streaming_worker_gets_a_streaming_policy(server, monkeypatch):
    assert isinstance(server.policy, StreamingPolicy) and server.streams()
    monkeypatch.setattr(FakeWorker, "streams", lambda self: False)
    assert isinstance(PolicyServer("unused").policy, BatchingPolicy)


def test_sleep_waits_for_the_requests_in_flight_and_holds_new_ones_until_the_wake(server):
    worker: FakeWorker = server.worker  # type: ignore[assignment]
    sleeper = InferSleeper(InferSleep(1, ("actor_train",)), _call_on(server), log=_no_log)

    async def step() -> None:
        rollout = [asyncio.create_task(server.policy.generate(_request(i))) for i in (1, 2)]
        await _settle()
        sleeping = asyncio.create_task(sleeper.before_training())
        await _settle()
        assert "sleep" not in worker.events  # requests 1 and 2 are still generating
        worker.gate.set()
        results = await asyncio.gather(*rollout)
        assert [r.policy_version for r in results] == [0, 0]
        assert "time/step_infer_sleep" in await sleeping and sleeper.asleep
        late = asyncio.create_task(server.policy.generate(_request(3)))  # e.g. an env slot still running
        await _settle()
        with pytest.raises(RuntimeError, match="wake_up before the weight sync"):
            await server.confirm_weights(1, "held")
        worker.events.append("train")
        assert "time/step_infer_wake" in await sleeper.before_weight_sync()
        await _settle()
        assert await server.confirm_weights(1, "held") == 1
        assert (await late).output_ids == [4]

    asyncio.run(step())
    assert worker.events == [
        "start 1 key 101",
        "start 2 key 102",
        "end 1",
        "end 2",
        "sleep",
        "train",
        "wake_up",
        "start 3 key 103",  # held back while the engine slept
        "end 3",
        "weights 1",
    ]


def test_an_engine_that_cannot_sleep_serves_on_and_the_reason_is_logged_once(monkeypatch):
    monkeypatch.setattr(roll_strategies, "ActorInferWorker", FakeWorker)
    server = PolicyServer("unused")
    server.worker.can_sleep = False  # type: ignore[attr-defined]
    logged: list[str] = []
    sleeper = InferSleeper(InferSleep(1, ("actor_train",)), _call_on(server), log=logged.append)

    async def two_steps() -> None:
        for _ in range(2):
            assert await sleeper.before_training() == {}
            assert not sleeper.asleep and not server.policy.lock.locked()
            assert await sleeper.before_weight_sync() == {}

    asyncio.run(two_steps())
    (message,) = logged
    assert "shares GPUs with ['actor_train']" in message and "no sleep mode on this platform" in message
    assert server.worker.events == ["sleep refused", "sleep refused"]  # type: ignore[attr-defined]


def test_nothing_sleeps_when_the_plan_says_so(server):
    sleeper = InferSleeper(InferSleep(1, ()), _call_on(server), log=_no_log)
    assert asyncio.run(sleeper.before_training()) == {} and server.worker.events == []  # type: ignore[attr-defined]


def _call_on(server: PolicyServer) -> Any:
    async def call(method: str, *args: Any) -> Any:
        result = getattr(server, method)(*args)
        return await result if asyncio.iscoroutine(result) else result

    return call


def _no_log(message: str) -> None:
    raise AssertionError(f"unexpected log: {message}")
