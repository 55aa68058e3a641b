"""`StreamingPolicy` (continuous batching): every request reaches the backend as it comes, each answer leaves
as soon as it is done, and `DrainLock` keeps weight updates apart from the requests in flight."""

from __future__ import annotations

import asyncio

import pytest
from roll_rollout import GenerateRequest, GenerateResult, PayloadError, SamplingSettings, StreamingPolicy
from roll_rollout.policies.policy import DrainLock, decode_results, encode_requests


class GatedBackend:
    """An async backend whose request i finishes when `release(i)` is called; records what it saw."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.started: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: GenerateRequest) -> GenerateResult:
        key = request.prompt_ids[0]
        gate = self.gates.setdefault(key, asyncio.Event())
        self.started.append(key)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await gate.wait()
        finally:
            self.in_flight -= 1
        return GenerateResult([key + 1], [-0.5], "stop", 0)

    def release(self, key: int) -> None:
        self.gates.setdefault(key, asyncio.Event()).set()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _request(key: int) -> GenerateRequest:
    return GenerateRequest([key], SamplingSettings())


def test_requests_reach_the_backend_at_once_and_finish_in_their_own_order():
    async def main() -> list[int]:
        backend = GatedBackend()
        policy = StreamingPolicy(backend)
        finished: list[int] = []

        async def slot(key: int) -> None:
            finished.append((await policy.generate(_request(key))).output_ids[0] - 1)

        first = asyncio.create_task(slot(0))
        await _settle()
        assert backend.started == [0]  # submitted alone, with no batch window
        later = [asyncio.create_task(slot(k)) for k in (1, 2)]  # arrive while request 0 runs
        await _settle()
        assert backend.started == [0, 1, 2] and backend.in_flight == 3  # not held back by request 0
        backend.release(2)
        await _settle()
        assert finished == [2]  # answered while 0 and 1 still generate
        backend.release(0)
        backend.release(1)
        await asyncio.gather(first, *later)
        assert policy.batch_sizes == [1, 2, 3]  # requests in flight when each went in
        return finished

    assert asyncio.run(main()) == [2, 0, 1]


def test_an_update_waits_for_the_requests_in_flight_and_holds_new_ones():
    async def main() -> list[str]:
        backend = GatedBackend()
        policy = StreamingPolicy(backend)
        events: list[str] = []

        async def slot(key: int) -> None:
            await policy.generate(_request(key))
            events.append(f"done {key}")

        async def update() -> None:
            async with policy.lock:
                events.append("update")
                assert backend.in_flight == 0
                await asyncio.sleep(0.01)
            events.append("update over")

        running = [asyncio.create_task(slot(k)) for k in (0, 1)]
        await _settle()
        updating = asyncio.create_task(update())
        await _settle()
        assert events == [] and policy.lock.locked()  # waits for 0 and 1
        held = asyncio.create_task(slot(2))  # arrives after the update asked: queued behind it
        await _settle()
        assert backend.started == [0, 1]
        backend.release(0)
        backend.release(1)
        backend.release(2)
        await asyncio.gather(*running, updating, held)
        return events

    events = asyncio.run(main())
    assert events.index("update") > max(events.index("done 0"), events.index("done 1"))
    assert events.index("done 2") > events.index("update over")


def test_an_exclusive_holder_can_keep_the_lock_across_calls():
    async def main() -> None:
        backend = GatedBackend()
        policy = StreamingPolicy(backend)
        backend.release(7)
        await policy.lock.acquire()  # e.g. an engine put to sleep until a later wake_up call
        waiting = asyncio.create_task(policy.generate(_request(7)))
        await asyncio.sleep(0.01)
        assert not waiting.done() and backend.started == []
        policy.lock.release()
        assert (await waiting).output_ids == [8]

    asyncio.run(main())


def test_a_cancelled_exclusive_waiter_lets_requests_go_on():
    async def main() -> None:
        lock = DrainLock()
        async with lock.shared():
            waiter = asyncio.create_task(lock.acquire())
            await _settle()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        assert not lock.locked() and lock.active == 0
        async with lock.shared():
            assert lock.active == 1

    asyncio.run(main())


def test_the_payload_call_submits_each_request_and_returns_the_set():
    async def main() -> None:
        backend = GatedBackend()
        policy = StreamingPolicy(backend)
        call = asyncio.create_task(
            policy.generate_many_payload(encode_requests([_request(k) for k in range(4)]))
        )
        await _settle()
        assert sorted(backend.started) == [0, 1, 2, 3] and backend.max_in_flight == 4
        for k in (3, 1, 0, 2):
            backend.release(k)
        results = decode_results(await call)
        assert [r.output_ids for r in results] == [[1], [2], [3], [4]]  # in the call's order

    asyncio.run(main())


def test_a_failing_request_fails_alone():
    async def backend(request: GenerateRequest) -> GenerateResult:
        if request.prompt_ids[0] == 1:
            raise RuntimeError("engine refused request 1")
        return GenerateResult([0], [-1.0], "stop", 0)

    async def main() -> None:
        policy = StreamingPolicy(backend)
        ok, failed = await asyncio.gather(
            policy.generate(_request(0)), policy.generate(_request(1)), return_exceptions=True
        )
        assert isinstance(ok, GenerateResult) and isinstance(failed, RuntimeError)
        assert policy.lock.active == 0 and not policy.lock.locked()
        with pytest.raises(PayloadError):
            await policy.generate_many_payload(b"\xc1")

    asyncio.run(main())
