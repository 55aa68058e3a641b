"""Policy clients: how an env manager asks a model for its next turn.

Token ids in, token ids and log-probs out (token-in/token-out), so the ids trained on are exactly the
ids that were sampled. Requests and results cross process boundaries as msgpack.

- `BatchingPolicy`: in-process; gathers the requests of many concurrent env loops into one batched
  call of a `generate_batch` function (static batching: backends such as hf_infer that generate a
  batch at a time).
- `StreamingPolicy`: in-process; hands every request to an async `generate_one` function as soon as it
  arrives, with no batch and no lock held while generating (continuous batching: backends such as vLLM
  whose engine schedules the requests in flight itself).
- `RemotePolicy`: coalesces the requests of the env loops in its process into one msgpack list per
  remote call of `generate_many(bytes) -> bytes` (a Ray actor hosting a `BatchingPolicy`): one actor
  call per turn of a worker's envs instead of one per env.
- `RandomPolicy`: samples random tokens from a fixed set; for tests and baselines.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import msgpack

from roll_rollout.errors import PayloadError
from roll_rollout.wire import REQUEST_DECODER, RESULT_DECODER, decode_typed


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample one turn."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    demonstrate: bool = False
    """The env's demonstrated answer instead of the policy's (`BaseEnv.demonstration`; behaviour cloning):
    the env manager never asks the policy, so this never travels in a request."""


@dataclass(frozen=True)
class GenerateRequest:
    """One turn's prompt, as token ids, and how to sample its response.

    `messages` (the same prompt as chat messages) is set only for policies whose `needs_messages` is
    true (a text-in chat API); it never crosses the msgpack wire. `sample_key` (an int in [0, 2**63))
    names the request's own random stream: a server that honours it samples the same tokens for the same
    key and weights whatever other requests share the batch (`seeds.sample_key`); None: the server's.
    """

    prompt_ids: list[int]
    sampling: SamplingSettings
    messages: tuple[dict[str, str], ...] | None = None
    sample_key: int | None = None


@dataclass(frozen=True)
class GenerateResult:
    """The sampled response ids, their log-probs, why sampling stopped, and the policy version."""

    output_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    policy_version: int


class PolicyClient(Protocol):
    """What an env manager needs from a policy."""

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Sample one response for `request.prompt_ids`."""
        ...


GenerateBatchFn = Callable[[Sequence[GenerateRequest]], list[GenerateResult]]
GenerateOneFn = Callable[[GenerateRequest], Awaitable[GenerateResult]]


def encode_request(request: GenerateRequest) -> bytes:
    """msgpack payload of a request."""
    sampling = asdict(request.sampling)
    del sampling["demonstrate"]  # a policy never sees a demonstrated turn
    msg: dict[str, Any] = {"prompt_ids": request.prompt_ids, "sampling": sampling}
    if request.sample_key is not None:
        msg["sample_key"] = request.sample_key
    return msgpack.packb(msg)


def decode_request(payload: bytes) -> GenerateRequest:
    """Inverse of `encode_request`, checking every field's type and range (`roll_rollout.wire`)."""
    msg = decode_typed(REQUEST_DECODER, payload, "generate request")
    s = msg.sampling
    sampling = SamplingSettings(s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.greedy)
    return GenerateRequest(msg.prompt_ids, sampling, sample_key=msg.sample_key)


def encode_result(result: GenerateResult) -> bytes:
    """msgpack payload of a result."""
    return msgpack.packb(asdict(result))


def decode_result(payload: bytes) -> GenerateResult:
    """Inverse of `encode_result`, checking every field's type and range (`roll_rollout.wire`)."""
    msg = decode_typed(RESULT_DECODER, payload, "generate result")
    if len(msg.log_probs) != len(msg.output_ids):
        raise PayloadError(
            f"generate result: {len(msg.log_probs)} log_probs for {len(msg.output_ids)} output ids; "
            "the backend must return one log-prob per sampled token"
        )
    return GenerateResult(msg.output_ids, msg.log_probs, msg.finish_reason, msg.policy_version)


def encode_requests(requests: Sequence[GenerateRequest]) -> bytes:
    """msgpack payload of a list of requests (one remote call)."""
    return msgpack.packb([encode_request(r) for r in requests])


def decode_requests(payload: bytes) -> list[GenerateRequest]:
    """Inverse of `encode_requests`, validating every request."""
    return [decode_request(item) for item in _unpack_list(payload, "generate request list")]


def encode_results(results: Sequence[GenerateResult]) -> bytes:
    """msgpack payload of a list of results."""
    return msgpack.packb([encode_result(r) for r in results])


def decode_results(payload: bytes) -> list[GenerateResult]:
    """Inverse of `encode_results`, validating every result."""
    return [decode_result(item) for item in _unpack_list(payload, "generate result list")]


def _unpack_list(payload: bytes, what: str) -> list[bytes]:
    msg = _unpack_any(payload, what)
    if not isinstance(msg, list):
        raise PayloadError(f"{what}: expected a list of msgpack payloads, got {type(msg).__name__}")
    for i, item in enumerate(msg):
        if not isinstance(item, bytes):
            raise PayloadError(
                f"{what}: expected a list of msgpack payloads, item {i} is {type(item).__name__}"
            )
    return msg


_Waiting = tuple[GenerateRequest, "asyncio.Future[GenerateResult]"]
"""A queued request and the future its caller awaits."""


def _settle(batch: Sequence[_Waiting], outcome: Sequence[GenerateResult] | BaseException) -> None:
    """Give each waiting caller its result, or every caller the error (also when the counts differ)."""
    if not isinstance(outcome, BaseException) and len(outcome) != len(batch):
        outcome = PayloadError(f"expected {len(batch)} generate results, got {len(outcome)}")
    for i, (_, fut) in enumerate(batch):
        if fut.done():
            continue
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome[i])


def _unpack_any(payload: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False)
    except Exception as exc:
        raise PayloadError(f"{what} is not valid msgpack ({type(exc).__name__}: {exc})") from exc


class BatchingPolicy:
    """Batches concurrent `generate` calls into calls of `generate_batch` (run in a worker thread).

    Requests are grouped by sampling settings (one batched call samples one way). When the backend is
    free, the batcher waits `batch_wait_s` for more requests to join (env loops answer at slightly
    different times), then generates; requests arriving meanwhile wait for the next batch. A short
    wait pays for itself: one batched call costs about as much as a call with a single request.
    """

    def __init__(
        self, generate_batch: GenerateBatchFn, max_batch_size: int = 256, batch_wait_s: float = 0.005
    ) -> None:
        self._generate_batch = generate_batch
        self._max_batch_size = max_batch_size
        self._batch_wait_s = batch_wait_s
        self._pending: list[_Waiting] = []
        self._wakeup: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()  # held while generating; weight updates take it too
        self.batch_sizes: list[int] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Queue `request` and wait for its result."""
        loop = asyncio.get_running_loop()
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._runner = loop.create_task(self._run())
        future: asyncio.Future[GenerateResult] = loop.create_future()
        self._pending.append((request, future))
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    async def _run(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(self._batch_wait_s)  # let requests in flight join the batch
            self._wakeup.clear()
            while self._pending:
                batch = self._take_batch()
                async with self.lock:
                    try:
                        results = await asyncio.to_thread(self._generate_batch, [r for r, _ in batch])
                    except Exception as exc:  # fail these requests, keep serving the others
                        _settle(batch, exc)
                        continue
                self.batch_sizes.append(len(batch))
                _settle(batch, results)

    def _take_batch(self) -> list[_Waiting]:
        sampling = self._pending[0][0].sampling
        batch, rest = [], []
        for item in self._pending:
            if item[0].sampling == sampling and len(batch) < self._max_batch_size:
                batch.append(item)
            else:
                rest.append(item)
        self._pending = rest
        return batch

    async def generate_many_payload(self, payload: bytes) -> bytes:
        """The msgpack form of `generate` over a list of requests, for remote callers (see `RemotePolicy`)."""
        requests = decode_requests(payload)
        return encode_results(await asyncio.gather(*(self.generate(r) for r in requests)))


class DrainLock:
    """Requests generate together (shared holders); an exclusive holder (a weight update, an engine put to
    sleep) waits until the requests in flight have finished and holds new ones back until it releases.

    Used like the `asyncio.Lock` of `BatchingPolicy`: `async with lock:`, or `await lock.acquire()` and
    `lock.release()` (an engine asleep between two remote calls holds it all that time). `shared()` is
    what each request holds while it generates. An exclusive holder that waits goes first: requests arriving
    after it queue behind it (the gate is a FIFO `asyncio.Lock`), so a steady stream of requests never
    starves an update.
    """

    def __init__(self) -> None:
        self._gate = asyncio.Lock()  # held by the exclusive holder; each request passes through it
        self._idle = asyncio.Event()
        self._idle.set()
        self.active = 0
        """Shared holders now (requests being generated)."""

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """Held by one request while it generates."""
        async with self._gate:
            self.active += 1
            self._idle.clear()
        try:
            yield
        finally:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

    async def acquire(self) -> None:
        """Take the lock exclusively: wait for the gate, then for the requests in flight to finish."""
        await self._gate.acquire()
        try:
            await self._idle.wait()
        except BaseException:
            self._gate.release()
            raise

    def release(self) -> None:
        """Let requests in again."""
        self._gate.release()

    def locked(self) -> bool:
        """Whether an exclusive holder has the lock (or is waiting for the requests in flight)."""
        return self._gate.locked()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class StreamingPolicy:
    """Hands each `generate` call to `generate_one` (a coroutine function) at once: continuous batching.

    For an engine that schedules the requests in flight itself (vLLM): it sees each request as soon as an
    env loop sends it, and answers each as soon as it is done, while others keep generating. Nothing is
    batched or held back here, except by `lock` (a `DrainLock`): a weight update takes it, which waits for
    the requests in flight and holds new ones until the new weights are in, so every result was sampled by
    one version of the weights. `batch_sizes` records, per request, how many were in flight (itself
    included) when it went in: the concurrency the engine saw, the counterpart of `BatchingPolicy`'s
    batch sizes.
    """

    def __init__(self, generate_one: GenerateOneFn) -> None:
        self._generate_one = generate_one
        self.lock = DrainLock()
        self.batch_sizes: list[int] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Submit `request` now and wait for its result."""
        async with self.lock.shared():
            self.batch_sizes.append(self.lock.active)
            return await self._generate_one(request)

    async def generate_many_payload(self, payload: bytes) -> bytes:
        """The msgpack form of `generate` over a list of requests (see `RemotePolicy`): each request goes to
        the engine on its own at once; the reply, one msgpack list, is sent when the last of them is done."""
        requests = decode_requests(payload)
        return encode_results(await asyncio.gather(*(self.generate(r) for r in requests)))


class RemotePolicy:
    """A `PolicyClient` that forwards requests, as msgpack lists, to a remote `generate_many(bytes)`.

    Requests made within `batch_wait_s` of each other (the env loops of one worker answer together)
    travel in one call; calls already in flight do not hold back the next. `remote_generate_many` gets
    the `encode_requests` payload and must return an awaitable of the `encode_results` payload, e.g.
    `lambda p: actor.generate_many.remote(p)` for a Ray actor handle.
    """

    def __init__(self, remote_generate_many: Callable[[bytes], Any], batch_wait_s: float = 0.002) -> None:
        self._remote = remote_generate_many
        self._batch_wait_s = batch_wait_s
        self._pending: list[_Waiting] = []
        self._collecting: asyncio.Task[None] | None = None  # the call still gathering requests
        self._calls: set[asyncio.Task[None]] = set()  # strong references to calls in flight

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Queue the request for the next call and wait for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerateResult] = loop.create_future()
        self._pending.append((request, future))
        collecting = self._collecting
        if collecting is None or collecting.done() or collecting.get_loop() is not loop:
            self._collecting = loop.create_task(self._send_after_wait())
            self._calls.add(self._collecting)
            self._collecting.add_done_callback(self._calls.discard)
        return await future

    async def _send_after_wait(self) -> None:
        await asyncio.sleep(self._batch_wait_s)
        batch, self._pending = self._pending, []
        # From here on this call is in flight: the next request starts the next call (it must not wait
        # for this one, or a request made now would wait for a later request that may never come).
        self._collecting = None
        try:
            results = decode_results(await self._remote(encode_requests([r for r, _ in batch])))
        except Exception as exc:  # fail this call's requests; later calls go on
            _settle(batch, exc)
            return
        _settle(batch, results)


class RandomPolicy:
    """Samples `max_new_tokens` ids uniformly from `token_ids` (a baseline and a test double)."""

    def __init__(self, token_ids: Sequence[int], seed: int = 0, stop_id: int | None = None) -> None:
        self._ids = list(token_ids)
        self._rng = random.Random(seed)
        self._stop_id = stop_id

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Random ids, stopping early at `stop_id` when one is drawn."""
        out: list[int] = []
        for _ in range(request.sampling.max_new_tokens):
            out.append(self._rng.choice(self._ids))
            if out[-1] == self._stop_id:
                return GenerateResult(out, [0.0] * len(out), "stop", 0)
        return GenerateResult(out, [0.0] * len(out), "length", 0)
