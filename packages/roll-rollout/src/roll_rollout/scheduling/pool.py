"""`WorkerPool`: the scheduler's links to its env workers — ordered sends, long polls, restarts.

Each worker has one poll loop (a long-poll `poll(wait)` call at a time) and an ordered send queue:
`submit` and `cancel` reach a worker in the order they were made (an `asyncio.Lock` is FIFO). The pool
knows which episodes each worker runs; when a call fails (a dead Ray actor) or the worker asks to be
recycled (hung env calls), it kills the worker, spawns a new one and reports the lost episodes, which
the scheduler replays. Results of a replaced worker that arrive late are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from roll_rollout.errors import PayloadError
from roll_rollout.hosting.env_manager import EpisodeJob
from roll_rollout.hosting.worker import encode_jobs
from roll_rollout.scheduling.groups import SpawnWorker, WorkerLink
from roll_rollout.schema import Trajectory, decode_trajectory

OnResults = Callable[[int, list[Trajectory], list[int], dict[str, Any]], None]
"""(worker, finished trajectories, cancelled episode ids, worker stats) -> None."""
OnReplaced = Callable[[int, list[int], str, bool], None]
"""(worker, lost episode ids, reason, recycled) -> None; called after the new worker is up."""
OnError = Callable[[int, BaseException], None]
"""(worker, the exception) -> None: a bug while handling a worker's results; its poll loop stops."""


class WorkerPool:
    """Links to `num_workers` env workers made by `spawn`."""

    def __init__(
        self,
        num_workers: int,
        spawn: SpawnWorker,
        on_results: OnResults,
        on_replaced: OnReplaced,
        on_error: OnError,
        poll_wait_s: float = 0.05,
    ) -> None:
        self.num_workers = num_workers
        self.restarts = 0
        self._spawn = spawn
        self._on_results = on_results
        self._on_replaced = on_replaced
        self._on_error = on_error
        self._poll_wait_s = poll_wait_s
        self._links: list[WorkerLink] = []
        self._generation: list[int] = []
        self._locks: list[asyncio.Lock] = []
        self._running: list[set[int]] = []
        self._pollers: list[asyncio.Task[None]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._active = False

    def start(self) -> None:
        """Spawn every worker and start polling them (on the running event loop)."""
        self._active = True
        self._links = [self._spawn(w) for w in range(self.num_workers)]
        self._generation = [0] * self.num_workers
        self._locks = [asyncio.Lock() for _ in range(self.num_workers)]
        self._running = [set() for _ in range(self.num_workers)]
        loop = asyncio.get_running_loop()
        self._pollers = [loop.create_task(self._poll_loop(w)) for w in range(self.num_workers)]

    def submit(self, w: int, jobs: Sequence[EpisodeJob]) -> None:
        """Send jobs to worker `w` (in the background, after earlier sends)."""
        self._running[w].update(job.episode_id for job in jobs)
        self._send(w, "submit", encode_jobs(jobs))

    def cancel(self, w: int, episode_ids: Sequence[int]) -> None:
        """Ask worker `w` to cancel these episodes (each comes back once: done or cancelled)."""
        self._send(w, "cancel", msgpack.packb(list(episode_ids)))

    def running(self, w: int) -> set[int]:
        """Episodes sent to worker `w` and not back yet."""
        return self._running[w]

    async def stop(self) -> list[int]:
        """Stop polling, kill every worker; returns the episodes that were still running."""
        self._active = False
        for task in self._pollers:
            task.cancel()
        for task in self._pollers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        running = sorted(e for ids in self._running for e in ids)
        for link in self._links:
            with contextlib.suppress(Exception):
                link.kill()
        self._pollers, self._links, self._running = [], [], []
        return running

    # ------------------------------------------------------------------ internals
    def _send(self, w: int, what: str, payload: bytes) -> None:
        generation = self._generation[w]
        task = asyncio.get_running_loop().create_task(self._send_now(w, what, payload, generation))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_now(self, w: int, what: str, payload: bytes, generation: int) -> None:
        async with self._locks[w]:  # FIFO: sends keep their order
            if generation != self._generation[w]:
                return  # the worker was replaced meanwhile; its episodes are replayed on the new one
            try:
                await getattr(self._links[w], what)(payload)
                return
            except Exception as exc:
                reason = f"{what} failed: {type(exc).__name__}: {exc}"
        await self._replace(w, generation, reason)

    async def _poll_loop(self, w: int) -> None:
        """Poll worker `w` until stopped; an error in handling its results is reported, never swallowed."""
        try:
            await self._poll_forever(w)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug on this side: without this, the rollout would stall silently
            self._on_error(w, exc)

    async def _poll_forever(self, w: int) -> None:
        while self._active:
            generation = self._generation[w]
            try:
                done, cancelled, stats = decode_poll_answer(await self._links[w].poll(self._poll_wait_s))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._replace(w, generation, f"poll failed: {type(exc).__name__}: {exc}")
                continue
            if generation != self._generation[w]:
                continue
            self._running[w].difference_update(cancelled)
            self._running[w].difference_update(t.episode_id for t in done)
            self._on_results(w, done, cancelled, stats)
            if stats.get("needs_recycle"):
                await self._replace(w, generation, "hung env calls hold every spare thread", recycle=True)

    async def _replace(self, w: int, generation: int, reason: str, recycle: bool = False) -> None:
        """Kill worker `w` and start a new one, once per failure; report its lost episodes."""
        async with self._locks[w]:  # sends to `w` wait for the new worker
            if generation != self._generation[w] or not self._active:
                return
            self._generation[w] += 1
            self.restarts += 1
            with contextlib.suppress(Exception):
                self._links[w].kill()
            lost, self._running[w] = sorted(self._running[w]), set()
            try:
                self._links[w] = await asyncio.to_thread(self._spawn, w)
            except Exception as exc:  # its calls fail, so the next poll retries, after a pause
                reason = f"{reason}; respawning failed: {type(exc).__name__}: {exc}"
                self._links[w] = _dead_link(reason)
                await asyncio.sleep(min(0.1 * 2 ** min(self.restarts, 6), 5.0))
        self._on_replaced(w, lost, reason, recycle)


def decode_poll_answer(payload: bytes) -> tuple[list[Trajectory], list[int], dict[str, Any]]:
    """The parts of an `EnvWorker.poll` answer, validated."""
    try:
        msg = msgpack.unpackb(payload, raw=False)
    except Exception as exc:
        raise PayloadError(f"poll answer is not valid msgpack: {exc}") from exc
    if not isinstance(msg, dict) or set(msg) != {"done", "cancelled", "stats"}:
        raise PayloadError(f"poll answer must be a map of done/cancelled/stats, got {msg!r:.200}")
    if not isinstance(msg["done"], list) or not isinstance(msg["cancelled"], list):
        raise PayloadError("poll answer: done and cancelled must be lists")
    if not all(type(i) is int for i in msg["cancelled"]) or not isinstance(msg["stats"], dict):
        raise PayloadError("poll answer: cancelled must be int episode ids and stats a map")
    return [decode_trajectory(p) for p in msg["done"]], msg["cancelled"], msg["stats"]


def _dead_link(reason: str) -> WorkerLink:
    """A link whose every call fails with `reason` (a worker that could not be respawned)."""

    async def fail(_arg: Any) -> Any:
        raise ConnectionError(reason)

    return WorkerLink(fail, fail, fail)
