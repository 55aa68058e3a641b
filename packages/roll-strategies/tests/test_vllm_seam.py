"""The vllm strategy at its engine seam, with a fake engine standing in for vLLM's AsyncLLM (no vllm needed):
continuous submission from another event loop (`agenerate_one`), per-request seeds, and the order and
guards of sleep / wake_up. The real engine runs the same code in test_vllm_infer.py and the pipeline test."""

from __future__ import annotations

import asyncio
import logging
import sys
import types
from typing import Any

import pytest
import torch
from roll_strategies import (
    ActorInferWorker,
    GenerationParams,
    SleepableStrategy,
    StrategyError,
    StreamingInferStrategy,
)
from roll_strategies.infer.sampling import row_keys
from roll_strategies.infer.sleep import sleep_unavailable
from roll_strategies.infer.vllm_infer import DROPPED_WEIGHTS, VLLMInferStrategy


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeEngine:
    """Records the calls the strategy makes; `generate` yields one final output after `latency_s`."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.latency_s = 0.0

    async def generate(self, prompt: dict[str, list[int]], sampling: Any, request_id: str):
        self.calls.append(("generate", tuple(prompt["prompt_token_ids"]), sampling.kwargs["seed"]))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        token = prompt["prompt_token_ids"][-1] + 1
        step = {token: types.SimpleNamespace(logprob=-0.25)}
        completion = types.SimpleNamespace(token_ids=[token], logprobs=[step], finish_reason="length")
        yield types.SimpleNamespace(outputs=[completion])

    async def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    async def wake_up(self) -> None:
        self.calls.append(("wake_up",))

    async def collective_rpc(self, method: str, args: tuple[Any, ...]) -> None:
        self.calls.append((method,))

    async def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))

    def shutdown(self) -> None:
        self.calls.append(("shutdown",))


def _strategy(monkeypatch, *, device: str = "cuda", sleep_level: int = 1, has_sleep: bool = True):
    """A VLLMInferStrategy whose engine is a `FakeEngine` (the real loop thread and weight receiver)."""
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    strategy = VLLMInferStrategy.__new__(VLLMInferStrategy)
    strategy.tokenizer = types.SimpleNamespace(eos_token_id=3)
    strategy.seed, strategy.per_request_seed = 11, True
    strategy.device, strategy.sleep_level = torch.device(device), sleep_level
    strategy.update_chunk_bytes = 1 << 20
    strategy.sleep_unavailable = sleep_unavailable(device, sleep_level, has_sleep)
    strategy.sleep_enabled = strategy.sleep_unavailable is None
    strategy._start(FakeEngine, {"w": (2,)})
    return strategy


@pytest.fixture
def fake(monkeypatch):
    strategy = _strategy(monkeypatch)
    yield strategy
    strategy.close()


def test_requests_from_another_loop_are_in_the_engine_together_and_keep_their_seeds(fake):
    fake.engine.latency_s = 0.05
    params = GenerationParams(max_new_tokens=1)

    async def env_slots() -> list[Any]:  # the caller's own event loop, not the engine's
        return await asyncio.gather(*(fake.agenerate_one([i + 10], params, sample_key=i) for i in range(8)))

    outs = asyncio.run(env_slots())
    assert [o.output_ids for o in outs] == [[i + 11] for i in range(8)]
    assert all(o.log_probs == [-0.25] and o.finish_reason == "length" for o in outs)
    assert fake.engine.max_in_flight == 8  # submitted one by one, all in flight at once
    seeds = {prompt[0] - 10: seed for _, prompt, seed in fake.engine.calls}
    assert seeds == {i: row_keys(11, 0, 1, [i])[0] for i in range(8)}  # the seed of its sample key alone


def test_worker_streams_only_with_a_continuously_batching_strategy(fake):
    worker = ActorInferWorker.__new__(ActorInferWorker)
    worker.strategy = fake
    assert isinstance(fake, StreamingInferStrategy) and isinstance(fake, SleepableStrategy)
    assert worker.streams()
    worker.strategy = types.SimpleNamespace(generate=lambda *a: [])  # a batch-at-a-time backend
    assert not worker.streams() and not worker.sleep()
    with pytest.raises(StrategyError, match="continuously batching"):
        asyncio.run(worker.agenerate_one([1], GenerationParams(max_new_tokens=1)))


def test_sleep_and_wake_reach_the_engine_in_order_and_sampling_waits_for_the_wake(fake):
    params = GenerationParams(max_new_tokens=1)
    assert fake.sleep() is True and fake.sleep() is True  # the second call: already asleep
    with pytest.raises(StrategyError, match="wake_up"):
        fake.generate([[1]], params)
    fake.wake_up()
    fake.wake_up()  # awake: nothing to do
    assert fake.generate([[1]], params)[0].output_ids == [2]
    assert [c[0] for c in fake.engine.calls] == ["sleep", "wake_up", "generate"]
    assert fake.engine.calls[0] == ("sleep", 1)  # the strategy_config's sleep_level


def test_a_level_2_sleep_drops_the_weights_until_the_next_sync(fake):
    params = GenerationParams(max_new_tokens=1)
    fake.update_weights({"w": torch.ones(2)}, version=1)
    held = fake.weights_fingerprint()
    assert fake.sleep(2) is True
    fake.wake_up()
    assert fake.weights_fingerprint() == DROPPED_WEIGHTS != held  # a sync cannot be skipped now
    with pytest.raises(StrategyError, match="level-2 sleep dropped them"):
        fake.generate([[1]], params)
    fake.update_weights({"w": torch.zeros(2)}, version=2)
    assert fake.generate([[1]], params)[0].output_ids == [2]
    names = [c[0] for c in fake.engine.calls]
    assert names == [
        "roll_load_weights",
        "reset_prefix_cache",
        "sleep",
        "wake_up",
        "roll_load_weights",
        "reset_prefix_cache",
        "generate",
    ]


def test_without_sleep_mode_sleep_is_skipped_with_the_reason_logged_once(monkeypatch, caplog):
    strategy = _strategy(monkeypatch, device="cpu", has_sleep=False)
    try:
        with caplog.at_level(logging.WARNING, logger="roll_strategies.infer.vllm_infer"):
            assert strategy.sleep() is False and strategy.sleep() is False
        (record,) = caplog.records
        assert "not put to sleep" in record.message and "no sleep mode" in record.message
        strategy.wake_up()
        assert strategy.engine.calls == []  # the engine never saw a sleep
        assert strategy.generate([[4]], GenerationParams(max_new_tokens=1))[0].output_ids == [5]
    finally:
        strategy.close()


def test_sleep_levels_are_checked():
    assert sleep_unavailable("cuda", 1, True) is None
    assert sleep_unavailable("cuda", 0, True) == "sleep_level is 0"
    assert "no sleep mode" in (sleep_unavailable("cpu", 1, False) or "")
    with pytest.raises(StrategyError, match="sleep_level"):
        sleep_unavailable("cuda", 3, True)
