"""The child side of `roll_rollout.hosting.env_process`: the zygote that forks env processes, and the loop of one.

`zygote(fd)` runs in a fresh Python started by the worker: it loads numpy and roll_envs once, then forks
a child for each socket the worker sends it (single-threaded, so forking is safe). A child runs
`serve(fd)`: it builds the env from the recipe the worker sends ("make") and answers "reset", "step",
"fixed_policy_answer", "demonstration" and "close" under one `EnvRandomState`, as roll's in-process
slots run envs, until "exit" or until its socket or its parent is gone. Requests and replies are msgpack
lists of plain data.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import msgpack

PID = struct.Struct("!q")
"""How the zygote answers a fork: the child's process id."""

FORK_REQUEST_BYTES = 4096
"""Longest fork request the zygote reads: "f", then the modules to import first, one per line."""

PROFILE = ("instruction", "metric_aggregation", "players", "fixed_policies")
"""Env attributes the worker reads (as plain data) after the constructor; players again after `reset`."""


def build(recipe: list[Any]) -> Any:
    """The env of an `EnvRecipe.plain()` list: `EnvSpec(id, entry_point, config, defaults).make(**config)`."""
    from roll_envs.registry import EnvSpec

    env_id, entry_point, config_model, defaults, env_config = recipe
    config = _load(config_model) if config_model else None
    return EnvSpec(env_id, entry_point, config, defaults).make(**env_config)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _plain(value: Any) -> Any:
    """msgpack's fallback: numpy scalars and arrays as Python values, tuples already lists."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(
        f"the env returned a {type(value).__name__}, which cannot leave its process: an env in a process of "
        "its own returns str, numbers, lists and dicts (or set EnvCallLimits(env_processes=False))"
    )


class _Host:
    """The child's env and random state; `handle` answers one request."""

    def __init__(self) -> None:
        from roll_envs.random_state import EnvRandomState

        self.state = EnvRandomState()
        self.env: Any = None

    def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from roll_envs.hints import declares_own_random_state

        if declares_own_random_state(self.env):
            return fn(*args, **kwargs)
        return self.state.run(fn, *args, **kwargs)

    def handle(self, op: str, args: list[Any]) -> Any:
        from roll_envs.random_state import DEFAULT_SEED

        if op == "make":
            with contextlib.suppress(Exception):  # the env it replaces failed; its close may fail too
                self._close()
            self.state.reseed(DEFAULT_SEED)
            self.env = self.state.run(functools.partial(build, args[0]))
            return [getattr(self.env, name, None) for name in PROFILE]
        if self.env is None:
            raise RuntimeError(f"no env to {op}: the worker sends 'make' first")
        if op == "reset":
            seed, options = args
            if seed is not None:
                self.state.reseed(seed)
            kwargs = {"seed": seed} if options is None else {"seed": seed, "options": options}
            obs, info = self._run(self.env.reset, **kwargs)
            return [obs, info, getattr(self.env, "players", ()), getattr(self.env, "fixed_policies", ())]
        if op == "step":
            return list(self._run(self.env.step, args[0]))
        if op == "fixed_policy_answer":
            return self._run(self.env.fixed_policy_answer, args[0])
        if op == "demonstration":
            demonstrate = getattr(self.env, "demonstration", None)
            return self._run(demonstrate) if callable(demonstrate) else None
        if op == "close":
            self._close()
            return None
        raise RuntimeError(f"unknown request {op!r}")

    def _close(self) -> None:
        """Close the env (under its state, as its other calls), then forget it."""
        if self.env is not None:
            try:
                self._run(self.env.close)
            finally:
                self.env = None


def _watch_parent(parent: int) -> None:
    """Exit once the parent is gone (a worker killed with SIGKILL cannot close its children)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def zygote(fd: int) -> None:
    """The zygote's loop: load what every child needs, then fork a child per socket received on `fd`,
    until it closes (the worker ended). Single-threaded, so forking is safe; children are reaped by the
    kernel (SIGCHLD ignored)."""
    import roll_envs.random_state  # noqa: F401  (loaded once, shared by every child)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    while True:
        try:
            request, fds, _, _ = socket.recv_fds(control, FORK_REQUEST_BYTES, 1)
        except OSError:
            break
        if not fds:
            break
        _preload(request.decode().split("\n")[1:])
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                serve(fds[0])
            finally:
                os._exit(0)
        os.close(fds[0])
        control.sendall(PID.pack(pid))


def _preload(modules: list[str]) -> None:
    """Import `modules` in the zygote, so that its children share them; one that fails is left to the child
    (which reports the error where the env is built). Objects alive now move out of the collector's reach
    (`gc.freeze`): a child's collections would otherwise write to, and so copy, every shared page."""
    missing = [name for name in modules if name and name not in sys.modules]
    for name in missing:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if missing:
        gc.freeze()


def serve(fd: int) -> None:
    """The child's loop: answer requests on the socket `fd` until "exit" or the socket closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the worker decides
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    conn = Connection(fd)
    host = _Host()
    try:
        conn.send_bytes(msgpack.packb(["ready"]))
        _answer(conn, host)
    except (EOFError, OSError):  # the worker closed the socket: nobody to answer
        pass
    with contextlib.suppress(BaseException):
        host._close()


def _answer(conn: Connection, host: _Host) -> None:
    """Answer requests until "exit"."""
    while True:
        op, *args = msgpack.unpackb(conn.recv_bytes(), raw=False, strict_map_key=False)
        if op == "exit":
            return
        try:
            reply = msgpack.packb(["ok", host.handle(op, args)], default=_plain)
        except BaseException as exc:
            text = "".join(traceback.format_exception(exc, limit=-6))
            reply = msgpack.packb(["error", type(exc).__name__, str(exc), text])
        conn.send_bytes(reply)
