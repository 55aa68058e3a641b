"""Env calls off the event loop: a bounded thread pool, a timeout per call, hung calls counted.

An env's `reset`/`step`/constructor is user code: it may be slow, raise, or never return. Run on the
worker's event loop, one such call would stall every env of the worker. `EnvCalls.run` runs it in a
thread instead, at most `max_concurrent` at a time, and gives up waiting after `timeout_s`.

Python cannot kill a thread. A call that timed out (or whose episode was cancelled) keeps its thread
until the env returns; `hung` counts those threads. The pool keeps `max_hung` spare threads so the
other envs go on; once `hung` reaches `max_hung` the worker reports `needs_recycle` and the scheduler
replaces the worker (a Ray actor is killed and restarted, which frees its threads; in-process, a fresh
worker is made and the stuck threads live on until their calls return, see docs/rollout.md).

The pool's threads are daemon threads (`DaemonThreadPool`): `concurrent.futures.ThreadPoolExecutor` joins
its threads at interpreter exit, so one env call that never returns would keep the process alive forever
after the run ended or failed.

A call given a `random_state` (`roll_envs.EnvRandomState`, one per env slot) runs with that env's own state
of `random` and `np.random`. Such calls are serialised by one process-wide lock; the timeout counts from
when a call holds it (waiting behind other envs' calls is not the env's fault), and a call that times out
or is cancelled gives it back (`IsolatedCall.abandon`), so a hung env holds up the others of its process
for at most `timeout_s`. A call without one (an env declaring `owns_random_state`, or an env living in a
child process, see `roll_rollout.hosting.env_manager` and `roll_rollout.hosting.env_process`) takes no lock: up to
`max_concurrent` of them run at once. `run(..., abandon=...)` ends a call that timed out or was cancelled
(an env process is killed), so its thread comes back instead of counting as hung.

A call made by `run_paced` (with a `CallPace`, one per env that owns its random state) may run on the event loop
itself, with no thread hop: which, and when, is `roll_rollout.hosting.call_pace`'s rule; one that hangs there ends the
worker (`roll_rollout.hosting.loop_watch`).

Slow calls (`EnvCalls.slow_after_s`): a reset or step that has run longer than `max(backup_after_s,
SLOW_CALL_FACTOR x the median of this worker's recent resets and steps)` is *slow*; the worker reports its
episode and the scheduler plays a backup of it (see `roll_rollout.scheduling.backups`: a validation pass then waits for
about `backup_after_s`, not the whole `timeout_s`; in training the backup takes the episode's place only if it
fails or times out, so no replay follows a timeout). A slow call also hands its concurrency permit on
(`CallTimer.hand_over`, called by the worker; it keeps its thread, one of the spares), so the worker's other
calls do not queue behind it. The median, not a high percentile: the first calls of freshly started env
processes are slow, and a percentile would lift the threshold past the timeout exactly when the first
validation pass needs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from roll_envs.random_state import EnvRandomState, IsolatedCall

from roll_rollout.errors import RolloutError
from roll_rollout.hosting.call_pace import INLINE_BELOW_S, INLINE_REVOKE_S, CallPace, InlineGrant, pace_for
from roll_rollout.hosting.loop_watch import LoopWatch

T = TypeVar("T")


BACKUP_AFTER_S = 2.0
"""The default floor of the slow-call threshold: a FrozenLake step takes microseconds, a sandbox run seconds."""

SLOW_CALL_FACTOR = 200.0
"""A call is slow past this many times the median of the worker's recent calls (and the floor)."""

SLOW_CALL_MIN_SAMPLES = 32
"""Calls timed before the median counts; until then the floor alone is the threshold."""

RETHRESHOLD_EVERY = 64
"""Timed calls between two recomputations of the threshold (a sort of the recent durations)."""

_STOP = None
"""Queue item that ends one pool thread."""


class DaemonThreadPool:
    """A minimal `ThreadPoolExecutor` of daemon threads: `submit` -> `concurrent.futures.Future`.

    Threads start on demand up to `max_threads` and are reused; none is joined at interpreter exit, so a
    call that never returns cannot keep the process alive.
    """

    def __init__(self, max_threads: int, name: str = "pool") -> None:
        self.max_threads = max_threads
        self.name = name
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name} pool is shut down; no new env calls")
            self._work.put((future, fn, args))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_threads:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not _STOP:
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # the caller reads it from the future
                    future.set_exception(exc)
            del item, future  # drop references before waiting for the next call
            self._idle.release()

    def shutdown(self) -> None:
        """Cancel queued calls and let idle threads exit; running calls finish in their thread."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    item[0].cancel()
            for _ in self._threads:
                self._work.put(_STOP)


class CallTimer:
    """When the running call of one env began, once it held a permit of `EnvCalls` (None between calls), and
    how it gives that permit back early: what the worker reads and calls for a slow call
    (`EnvCalls.slow_after_s`)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.hand_over: Callable[[], None] | None = None


class EnvCallError(RolloutError):
    """An env's reset, step or constructor raised; `__cause__` is the env's own exception."""


class EnvCallTimeout(EnvCallError):
    """An env call did not return within the timeout; its thread is counted as hung."""


class EnvCalls:
    """Runs env calls in a bounded thread pool, each under a timeout."""

    def __init__(
        self,
        max_concurrent: int = 8,
        timeout_s: float = 60.0,
        max_hung: int = 4,
        inline_below_s: float | None = INLINE_BELOW_S,
        backup_after_s: float = BACKUP_AFTER_S,
    ) -> None:
        if (
            max_concurrent < 1
            or max_hung < 1
            or not timeout_s > 0
            or not (inline_below_s is None or inline_below_s >= 0)
            or not backup_after_s >= 0
        ):
            raise ValueError(
                f"EnvCalls needs max_concurrent >= 1, max_hung >= 1, timeout_s > 0, inline_below_s None or >= 0 and "
                f"backup_after_s >= 0; got {max_concurrent}, {max_hung}, {timeout_s}, {inline_below_s}, "
                f"{backup_after_s}"
            )
        self.max_concurrent = max_concurrent
        self.inline_below_s = inline_below_s
        self.timeout_s = timeout_s
        self.max_hung = max_hung
        self.backup_after_s = backup_after_s
        self._durations: deque[float] = deque(maxlen=1024)  # recent resets and steps, seconds
        self._noted = 0
        self._threshold = self._compute_threshold()
        # Spare threads for calls that hang, so the healthy envs keep max_concurrent threads.
        self._pool = DaemonThreadPool(max_concurrent + max_hung, name="roll-env")
        self._slots: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._hung = 0
        self._grants: dict[type, InlineGrant] = {}  # per env class: may its calls still run inline?
        self.watch = LoopWatch(
            timeout_s
        )  # ends the worker if an inline call hangs (roll_rollout.hosting.loop_watch)

    def note_duration(self, seconds: float) -> None:
        """Record how long a reset or step took (what `slow_after_s` reads)."""
        self._durations.append(seconds)
        self._noted += 1
        if self._noted % RETHRESHOLD_EVERY == 0 or self._noted == SLOW_CALL_MIN_SAMPLES:
            self._threshold = self._compute_threshold()

    def slow_after_s(self) -> float | None:
        """Seconds after which a running reset or step counts as slow (module docstring); None when backups
        are off (`backup_after_s` 0) or the threshold reaches the timeout (which then ends the call first).
        Recomputed every `RETHRESHOLD_EVERY` timed calls: every call asks for it."""
        return self._threshold

    def _compute_threshold(self) -> float | None:
        if self.backup_after_s <= 0:
            return None
        threshold = self.backup_after_s
        if len(self._durations) >= SLOW_CALL_MIN_SAMPLES:
            ordered = sorted(self._durations)
            threshold = max(threshold, SLOW_CALL_FACTOR * ordered[len(ordered) // 2])
        return threshold if threshold < self.timeout_s else None

    def pace(self, env: Any = None) -> CallPace:
        """A fresh `CallPace` for `env` (one owning its random state: its calls may then run inline), sharing
        its class's `InlineGrant` of this worker (`roll_rollout.hosting.call_pace.pace_for`)."""
        return pace_for(env, self.inline_below_s, self._grants)

    @property
    def hung(self) -> int:
        """Calls still running in their thread after a timeout or a cancelled episode."""
        with self._lock:
            return self._hung

    @property
    def needs_recycle(self) -> bool:
        """Whether hung calls hold every spare thread: the worker process should be replaced."""
        return self.hung >= self.max_hung

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        what: str = "env call",
        random_state: EnvRandomState | None = None,
        abandon: Callable[[], None] | None = None,
        timer: CallTimer | None = None,
    ) -> T:
        """`fn(*args)` in a pool thread; `EnvCallError` if it raises, `EnvCallTimeout` after `timeout_s`.

        With `random_state`, the call runs under that env's state of `random` and `np.random`, and the
        timeout starts once it holds the process-wide lock of such calls (see the module docstring).
        Cancelling the awaiting task does not stop the thread: the call is counted as hung until it ends,
        and the caller must not use the env again (it may be mid-step). `abandon`, when given, is called
        then (after a timeout too) to end the call: for an env in a child process, it kills the child
        (`roll_rollout.hosting.env_process`), so the thread returns at once.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        slots = self._slots
        await slots.acquire()
        permit = [True]

        def give_back() -> None:
            if permit[0]:
                permit[0] = False
                slots.release()

        call = None if random_state is None else random_state.call(fn, *args)
        if timer is not None:
            timer.started = time.monotonic()  # from here: waiting for a permit is not the env's time
            # a slow call (likely hung) hands its permit on when the worker finds it slow, so the others of
            # the worker (its episode's backup among them) do not wait for its timeout; it keeps its thread
            # (one of the spares). An isolated call holds the random-state lock anyway: it keeps its permit.
            timer.hand_over = give_back if call is None else None
        try:
            future = self._pool.submit(fn, *args) if call is None else self._pool.submit(call)
            if abandon is None:
                abandon = _nothing if call is None else call.abandon
            waiter = asyncio.wrap_future(future)
            try:
                return await self._wait(waiter, call)
            except _Expired:
                abandon()
                self._detach(future, waiter)
                raise EnvCallTimeout(
                    f"{what} did not return within env_step_timeout_s={self.timeout_s:g} s; the env is "
                    "abandoned and recreated (raise the timeout if the env is just slow)"
                ) from None
            except asyncio.CancelledError:
                if not future.done():
                    abandon()
                    self._detach(future, waiter)
                raise
            except Exception as exc:
                raise EnvCallError(f"{what} raised {type(exc).__name__}: {exc}") from exc
        finally:
            give_back()
            if timer is not None:
                timer.started = timer.hand_over = None

    async def run_paced(
        self,
        pace: CallPace,
        fn: Callable[..., T],
        *args: Any,
        what: str = "env call",
        timer: CallTimer | None = None,
    ) -> T:
        """`fn(*args)` of an env owning its random state: inline while `pace` says its calls are fast, else
        as `run` does (timed, for the next call's choice). See the module docstring."""
        if pace.fast and pace.grant.open:
            return self._run_inline(fn, args, what, pace)
        return await self.run(pace.timed(fn), *args, what=what, timer=timer)

    def _run_inline(self, fn: Callable[..., T], args: tuple[Any, ...], what: str, pace: CallPace) -> T:
        """`fn(*args)` on the event loop, with the outcomes of a pool call: an error or an overrun of
        `timeout_s` fails the call the same way (the overrun only once it returned)."""
        self.watch.begin(what, pace.grant.env_class)  # before the clock: its first call starts its thread
        began = time.perf_counter()
        try:
            result = fn(*args)
        except Exception as exc:
            pace.fast = False
            raise EnvCallError(f"{what} raised {type(exc).__name__}: {exc}") from exc
        finally:
            self.watch.end()
        took = time.perf_counter() - began
        pace.fast = took < pace.inline_below_s
        pace.grant.record(what, took, max(INLINE_REVOKE_S, pace.inline_below_s))  # held the loop? (revokes)
        if took > self.timeout_s:
            raise EnvCallTimeout(
                f"{what} did not return within env_step_timeout_s={self.timeout_s:g} s (it took {took:.3g} s); "
                "the env is abandoned and recreated (raise the timeout if the env is just slow)"
            )
        return result

    async def _wait(self, waiter: asyncio.Future[T], call: IsolatedCall[T] | None) -> T:
        """`waiter`'s result; `_Expired` once the call has run `timeout_s`: from now, or for an isolated
        `call` from when it got the lock (waiting for it is not timed). Leaves a running call alone."""
        if call is None:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel racing its timeout
            timeout = asyncio.timeout(self.timeout_s)
            try:
                async with timeout:
                    return await waiter  # cancelling it leaves a running thread alone
            except TimeoutError:
                if timeout.expired():
                    raise _Expired from None
                raise  # the env's own TimeoutError
        remaining = self.timeout_s
        while True:
            # asyncio.wait, not wait_for: it neither cancels the waiter nor swallows a cancel of this task
            done, _ = await asyncio.wait((waiter,), timeout=remaining)
            if done:
                return waiter.result()
            began = call.started_at
            remaining = self.timeout_s if began is None else began + self.timeout_s - time.monotonic()
            if remaining <= 0:
                raise _Expired

    def _detach(self, future: concurrent.futures.Future[Any], waiter: asyncio.Future[Any]) -> None:
        """Count `future`'s thread as hung until the call returns (whose outcome nobody reads)."""
        with self._lock:
            self._hung += 1
        future.add_done_callback(self._call_ended)
        waiter.add_done_callback(_ignore_outcome)

    def _call_ended(self, _future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._hung -= 1

    def shutdown(self) -> None:
        """Stop accepting calls; idle threads exit, hung ones when their call returns."""
        self._pool.shutdown()
        self.watch.stop()


class _Expired(Exception):
    """An env call ran past its timeout (not `TimeoutError`: an env may raise that itself)."""


def _nothing() -> None:
    """What abandoning a call that holds no lock does."""


def _ignore_outcome(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned call's exception as read (asyncio would log it as never retrieved)."""
    if not future.cancelled():
        future.exception()
