"""The ranks of a trained role as child processes, for `cluster.backend=local`.

A process holds one torch.distributed group, so the N data-parallel ranks of a role cannot all live in the
driver's process as `LocalCluster`'s other workers do: each runs in a child process (multiprocessing "spawn": a
fresh interpreter, safe with CUDA and threads) that builds its worker and then serves calls sent over a pipe,
one at a time, until it is closed. `spawn_rank_processes` starts the N children together (they meet in their
group while being built) and returns once every one is built, or raises the first failure after stopping the
others (a rank left waiting for a peer that died would wait for torch's rendezvous timeout).
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import threading
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = ["RankProcess", "RankProcessError", "spawn_rank_processes"]

CLOSE_TIMEOUT_S = 10.0
"""How long a child may take to exit after it is asked to, before it is terminated."""


class RankProcessError(RuntimeError):
    """A rank's child process died or could not be built; the message names the rank and its exit code."""


def _serve(conn: Connection, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The child: build `cls(*args, **kwargs)`, report, then answer (method, args, kwargs) messages until None."""
    try:
        worker = cls(*args, **kwargs)
    except BaseException as exc:
        conn.send((False, _portable(exc)))
        return
    conn.send((True, None))
    while (message := conn.recv()) is not None:
        method, margs, mkwargs = message
        try:
            conn.send((True, getattr(worker, method)(*margs, **mkwargs)))
        except BaseException as exc:
            conn.send((False, _portable(exc)))
    close = getattr(worker, "close", None)
    if callable(close):
        close()


def _portable(exc: BaseException) -> BaseException:
    """`exc` with its child-side traceback as a note, or a RuntimeError saying the same when it cannot be
    pickled (the parent re-raises it)."""
    import pickle

    text = "".join(traceback.format_exception(exc))
    try:
        exc.add_note(f"in the rank's process:\n{text}")
        pickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}\nin the rank's process:\n{text}")


class RankProcess:
    """One rank's worker in a child process; `call(method, *args, **kwargs)` is awaitable (`LocalCluster.call`
    routes to it). Calls to one rank run one at a time, calls to different ranks concurrently."""

    def __init__(self, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any], name: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.name = name
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, cls, tuple(args), dict(kwargs)), name=name, daemon=True
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()

    @property
    def connection(self) -> Connection:
        """The driver's end of the pipe (readable once the child reports its build)."""
        return self._conn

    def built(self) -> None:
        """Read the child's build report: return when it built its worker, raise what it raised otherwise."""
        self._receive()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """`method(*args, **kwargs)` on the child's worker; awaitable arguments are awaited first (as
        `LocalCluster.call` does)."""
        args = tuple([await a if inspect.isawaitable(a) else a for a in args])
        return await asyncio.to_thread(self._roundtrip, (method, args, kwargs))

    def _roundtrip(self, message: tuple[str, tuple[Any, ...], dict[str, Any]]) -> Any:
        with self._lock:
            try:
                self._conn.send(message)
            except (BrokenPipeError, ConnectionResetError, OSError) as exc:
                raise self._died() from exc
            return self._receive()

    def _receive(self) -> Any:
        try:
            ok, value = self._conn.recv()
        except (EOFError, ConnectionResetError, OSError) as exc:
            raise self._died() from exc
        if not ok:
            raise value
        return value

    def _died(self) -> RankProcessError:
        self._process.join(timeout=1.0)
        return RankProcessError(
            f"{self.name} (pid {self._process.pid}) exited with code {self._process.exitcode} before answering;"
            " its output above says why (out of memory is the usual cause). Restart the run, resuming from the"
            " last checkpoint."
        )

    def close(self) -> None:
        """Ask the child to exit; terminate it if it does not within `CLOSE_TIMEOUT_S`."""
        if self._process.is_alive() and self._lock.acquire(timeout=CLOSE_TIMEOUT_S):
            try:
                self._conn.send(None)
            except OSError:
                pass
            finally:
                self._lock.release()
        self._process.join(timeout=CLOSE_TIMEOUT_S)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=CLOSE_TIMEOUT_S)
        self._conn.close()


def spawn_rank_processes(
    cls: type, args: Sequence[Any], rank_kwargs: Sequence[Mapping[str, Any]], name: str
) -> list[RankProcess]:
    """Start one child per entry of `rank_kwargs` (rank r builds `cls(*args, **rank_kwargs[r])`) and wait until
    all are built; on the first failure stop them all and raise it."""
    ranks = [RankProcess(cls, args, kw, f"{name} rank {r}") for r, kw in enumerate(rank_kwargs)]
    waiting = {rank.connection: rank for rank in ranks}
    try:
        while waiting:
            for conn in wait(list(waiting)):
                waiting.pop(conn).built()  # type: ignore[arg-type]
    except BaseException:
        for rank in ranks:
            rank.close()
        raise
    return ranks
