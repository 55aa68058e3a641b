"""An env slot's env in a child process of its own: its random state is its own, its calls run beside the
other slots' calls, and a call that hangs is ended by killing the child.

An env that does not declare `owns_random_state` may draw from the process-wide `random` and `np.random`.
In the worker's process such calls take turns behind one lock (`roll_envs.random_state`), so one hung call
holds up every other undeclared env of the worker until its timeout. In a child process the generators
are the child's alone: no lock, and a call that times out or whose episode is cancelled kills the child
(`EnvProcess.kill`), which ends the call, frees its thread and leaves the other slots alone; the slot's
next episode starts a fresh child.

Children are forked from one zygote per worker process (`roll_rollout.hosting.env_child.zygote`: a Python that
has loaded numpy and roll_envs and runs no thread), so a child starts in milliseconds and shares the
zygote's memory pages. Before forking a child the zygote imports the env's modules (`EnvRecipe.preload`:
the env class's and its config's, and the libraries the class names in `process_preload`), so that 256
reasoning-gym slots share one import instead of holding about 100 MB each. A child runs
`env_child.serve(FD)`, talking over a socket (FD, passed through the zygote): msgpack requests and
replies, each a plain-data list, framed by `multiprocessing.connection.Connection` (no pickle crosses).
It builds the env from an `EnvRecipe` (the registry entry as import paths and plain config), then runs
the env's calls as roll's in-process slots do: constructor from `DEFAULT_SEED`, `reset(seed=s)` after
reseeding from `s`, all under one `EnvRandomState`, so one seed gives the episode it gives in-process.
The child exits when the worker closes it, when its socket closes, or when its parent process is gone.
Starting the zygote (a Python with numpy and roll_envs: seconds on a busy machine) is roll's work, so it
is waited for apart from the env's calls (`EnvProcess.wait_ready`, up to `START_TIMEOUT_S`), and the
constructor's `env_step_timeout_s` counts from a running child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import msgpack

from roll_rollout.errors import RolloutError
from roll_rollout.hosting.env_child import FORK_REQUEST_BYTES, PID, PROFILE

_ZYGOTE = "import sys; from roll_rollout.hosting.env_child import zygote; zygote(int(sys.argv[1]))"
"""The zygote's program (not `-m`: the package's `__init__` imports the module first)."""
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The zygote forks: no BLAS thread pool may run in it (and an env's arrays are small)."""

START_TIMEOUT_S = 120.0
"""How long a child may take to start (Python, numpy, roll_envs) before it is killed; not the env's time,
so not `env_step_timeout_s`."""


class EnvProcessError(RolloutError):
    """An env call failed in the env's process: the env raised (its type and message here, its traceback
    as a note), or the process died."""


class EnvRecipeError(RolloutError):
    """A registered env cannot be rebuilt in a child process (its entry point is not importable there)."""


@dataclass(frozen=True)
class EnvRecipe:
    """How a child process builds an env: a registry entry as import paths and plain config.

    `entry_point` and `config_model` are "module:qualname" strings (`config_model` "" for none); the env is
    `roll_envs.registry.EnvSpec(id, entry_point, config_model, defaults).make(**env_config)`, as
    `roll_envs.make(id, **env_config)` builds it in the worker.
    """

    id: str
    entry_point: str
    config_model: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    """Modules the zygote imports before forking this env's child: the entry point's and the config's
    modules, then the env class's `process_preload` (`roll_envs.BaseEnv`)."""

    @classmethod
    def of(cls, env_type: str, env_config: dict[str, Any]) -> EnvRecipe:
        """The recipe of `roll_envs.make(env_type, **env_config)`; `EnvRecipeError` if it cannot cross."""
        from roll_envs.registry import spec

        found = spec(env_type)
        entry_point = _import_path(found.entry_point, found.id)
        config_model = "" if found.config is None else _import_path(found.config, found.id)
        try:
            declared = getattr(found.load(), "process_preload", ())
        except Exception:  # an entry point that does not load fails where the child builds the env
            declared = ()
        preload = [path.partition(":")[0] for path in (entry_point, config_model) if path]
        recipe = cls(
            found.id,
            entry_point,
            config_model,
            dict(found.defaults),
            dict(env_config),
            tuple(dict.fromkeys([*preload, *(declared if isinstance(declared, (tuple, list)) else ())])),
        )
        try:
            msgpack.packb(recipe.plain())
        except TypeError as exc:
            raise EnvRecipeError(
                f"env {env_type!r}: its config must be plain data (str, numbers, lists, dicts) to reach the "
                f"env's process ({exc}); fix the config or set EnvCallLimits(env_processes=False)"
            ) from None
        return recipe

    def plain(self) -> list[Any]:
        """The recipe as a msgpack-able list."""
        return [self.id, self.entry_point, self.config_model, self.defaults, self.env_config]


def _import_path(obj: Any, env_id: str) -> str:
    """ "module:qualname" of a registered class or function, importable in a fresh process."""
    if isinstance(obj, str):
        return obj
    module, name = getattr(obj, "__module__", ""), getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        raise EnvRecipeError(
            f"env {env_id!r}: its entry point {obj!r} cannot be imported in the env's process (it is defined "
            "in __main__ or inside a function); register a 'package.module:ClassName' instead, or set "
            "EnvCallLimits(env_processes=False)"
        )
    return f"{module}:{name}"


class EnvProcess:
    """One env slot's child process (started by `launch` or the first `make`, again after a `kill`).

    `make`, and the calls of the env it returns, block their thread until the child answers: run them in
    `EnvCalls`' pool. `kill` may be called from any thread.
    """

    def __init__(self, recipe: EnvRecipe) -> None:
        self.recipe = recipe
        self._lock = threading.Lock()
        self._child: int | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._starting = threading.Lock()
        self.started = 0
        """Children started so far (a new one after each kill)."""

    @property
    def pid(self) -> int | None:
        """The running child's process id (None when none runs: not launched yet, killed or closed)."""
        with self._lock:
            return self._child

    def launch(self) -> None:
        """Start loading what a child needs (the zygote) without waiting for it."""
        _Zygote.shared()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start a child unless one runs, and wait until it has loaded roll_envs and answers; a child not
        ready within `timeout_s` is killed (`EnvProcessError`)."""
        with self._starting:
            with self._lock:
                conn, ready = self._conn, self._ready
            if conn is None:
                conn = self._start()
            elif ready:
                return
            try:
                if not conn.poll(timeout_s):
                    raise EOFError
                msgpack.unpackb(conn.recv_bytes())
            except (EOFError, OSError):
                self._lost(conn)
                raise EnvProcessError(
                    f"env {self.recipe.id!r}: its process did not start within {timeout_s:g} s (or died "
                    "starting); see the worker's stderr"
                ) from None
            with self._lock:
                self._ready = self._ready or self._conn is conn

    def make(self) -> ProcessEnv:
        """A fresh env in the child (started first if none runs); the previous env there is closed."""
        self.wait_ready()
        with self._lock:
            child = self.started
        reply = self._call(child, "make", self.recipe.plain())
        return ProcessEnv(self, child, dict(zip(PROFILE, reply, strict=True)))

    def kill(self) -> None:
        """Kill the child (a call blocked on it raises `EnvProcessError` at once); the next `make` starts
        another."""
        with self._lock:
            child, self._child = self._child, None
            conn, self._conn = self._conn, None
        if child is not None:
            _kill(child)
        del conn  # the call blocked on it, if any, still holds it; closed when that call returns

    def close(self) -> None:
        """Ask the child to close its env and exit, without waiting; kill it if it cannot be asked."""
        with self._lock:
            child, conn = self._child, self._conn
            self._child = self._conn = None
        if child is None or conn is None:
            return
        try:
            conn.send_bytes(msgpack.packb(["exit"]))
            conn.close()
        except OSError:
            _kill(child)

    def _call(self, child: int, op: str, *args: Any) -> Any:
        """Send one request to the `child`-th child and wait for its reply (a slot makes one call at a
        time); `EnvProcessError` if that child is gone (an env of a killed child is never revived)."""
        with self._lock:
            conn = self._conn if self.started == child else None
        if conn is None:
            raise EnvProcessError(
                f"env {self.recipe.id!r} {op}: the env's process was killed or closed; make a new env"
            )
        try:
            conn.send_bytes(msgpack.packb([op, *args]))
            reply = msgpack.unpackb(conn.recv_bytes(), raw=False, strict_map_key=False)
        except (EOFError, OSError):
            self._lost(conn)
            raise EnvProcessError(
                f"env {self.recipe.id!r} {op}: the env's process ended during the call (killed after a "
                "timeout, or it crashed); a new one starts with the next episode"
            ) from None
        if reply[0] == "ok":
            return reply[1]
        _, kind, message, child_traceback = reply
        error = EnvProcessError(f"{kind}: {message}")
        error.add_note(f"in the env's process:\n{child_traceback}")
        raise error

    def _start(self) -> Connection:
        """Fork a child (waiting for the zygote to be ready first) and keep its socket."""
        ours, theirs = socket.socketpair()
        try:
            pid = _Zygote.shared().fork(theirs, self.recipe.preload)
        except OSError as exc:
            ours.close()
            raise EnvProcessError(
                f"env {self.recipe.id!r}: no env process could be started ({exc}); see the worker's stderr"
            ) from exc
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        with self._lock:
            self._child, self._conn, self._ready = pid, conn, False
            self.started += 1
        return conn

    def _lost(self, conn: Connection) -> None:
        """Forget a child whose socket broke (unless a kill already did)."""
        with self._lock:
            if self._conn is conn:
                child, self._child, self._conn = self._child, None, None
            else:
                child = None
        with contextlib.suppress(OSError):
            conn.close()
        if child is not None:
            _kill(child)


def _kill(pid: int) -> None:
    """SIGKILL a child of the zygote (which reaps it)."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


class _Zygote:
    """The worker process's zygote: `fork(sock)` -> the pid of a new child serving on `sock`."""

    _shared: _Zygote | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> _Zygote:
        """The process's zygote, started on first use and again if it died."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared.process.poll() is not None:
                cls._shared = cls()
            return cls._shared

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env={**os.environ, **_ONE_THREAD},
            )
        finally:
            theirs.close()
        ours.settimeout(START_TIMEOUT_S)
        self.sock = ours
        self._lock = threading.Lock()

    def fork(self, child_sock: socket.socket, preload: tuple[str, ...] = ()) -> int:
        """A new child serving on `child_sock` (a socket of a pair; the caller keeps the other end), forked
        after the zygote has imported the modules of `preload`; the first waits for the zygote to load. On
        failure the zygote is killed (the next call starts one)."""
        request = "\n".join(("f", *preload)).encode()
        if len(request) > FORK_REQUEST_BYTES:
            request = b"f"  # the child imports them itself: slower, never wrong
        with self._lock:
            try:
                socket.send_fds(self.sock, [request], [child_sock.fileno()])
                return int(PID.unpack(_recv_exactly(self.sock, PID.size))[0])
            except OSError:
                self.process.kill()
                raise


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise ConnectionError("the env processes' zygote ended")
        data += part
    return data


class ProcessEnv:
    """The worker's side of an env living in an `EnvProcess`: `reset`, `step`, `fixed_policy_answer`,
    `demonstration` and `close` are requests to the child; `instruction`, `metric_aggregation`, `players`
    and `fixed_policies` are the values the child read after the constructor (players and fixed policies
    again after each `reset`). It declares `owns_random_state`: in this process its calls touch no generator."""

    owns_random_state = True

    def __init__(self, process: EnvProcess, child: int, profile: dict[str, Any]) -> None:
        self.process = process
        self._child = child
        self.instruction = profile["instruction"]
        self.metric_aggregation = profile["metric_aggregation"] or {}
        self.players = tuple(profile["players"] or ())
        self.fixed_policies = tuple(profile["fixed_policies"] or ())

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        """`env.reset(seed=seed)` in the child (`options=options` when given), its state reseeded first."""
        obs, info, players, fixed = self.process._call(self._child, "reset", seed, options)
        self.players, self.fixed_policies = tuple(players or ()), tuple(fixed or ())
        return obs, info

    def step(self, action: str) -> tuple[Any, Any, Any, Any, Any]:
        """`env.step(action)` in the child."""
        obs, reward, terminated, truncated, info = self.process._call(self._child, "step", action)
        return obs, reward, terminated, truncated, info

    def fixed_policy_answer(self, name: str) -> str:
        """`env.fixed_policy_answer(name)` in the child."""
        return str(self.process._call(self._child, "fixed_policy_answer", name))

    def demonstration(self) -> str | None:
        """`env.demonstration()` in the child (`roll_envs.BaseEnv`); None for an env without the hook."""
        answer = self.process._call(self._child, "demonstration")
        return None if answer is None else str(answer)

    def close(self) -> None:
        """`env.close()` in the child (the child stays, for the slot's next env)."""
        self.process._call(self._child, "close")
