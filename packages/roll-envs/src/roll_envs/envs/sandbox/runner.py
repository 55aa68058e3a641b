"""Running one tool call in a fresh, limited subprocess, and reading its output within bounds.

`run_call(argv, episode_dir, limits, isolate)` starts `launcher.py` (which sets the limits and execs `argv`)
in a session of its own, reads stdout and stderr up to `limits.output_bytes`, and kills the whole session
with SIGKILL when the call exits, overruns its wall time or its output budget. With `isolate`, the launcher
runs under `unshare` in new user, network, PID and mount namespaces: when the namespace's PID 1 exits the
kernel kills every process of the call, `setsid` daemons included. Every `WATCH_SECONDS` while it runs, the
call is killed when its episode directory outgrows `limits.disk_bytes` or (isolated) the resident memory of
all its processes together passes `limits.call_memory_bytes`. `isolation_available()` probes once per
process whether isolation works here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from roll_envs.envs.sandbox.workdir import tree_bytes

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
UNSHARE = ("--net", "--pid", "--fork", "--kill-child", "--mount")
"""`unshare` options of an isolated call: no network, its own PIDs, its own mounts."""
USER_NAMESPACE = ("--user", "--map-root-user")
"""Added for a worker that is not root: root inside the namespace only, the worker's uid outside."""

PYTHON = os.path.realpath(sys.executable)
"""The interpreter the calls run (the env's own, resolved out of any virtual environment)."""

PYTHON_HOME = os.path.realpath(sys.base_prefix)
WATCH_SECONDS = 0.1
"""How often a running call's memory and its episode directory's size are measured."""
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Limits:
    """The limits of one call."""

    cpu_seconds: int = 5
    """CPU time; past it the call gets SIGXCPU, a second later SIGKILL."""
    wall_seconds: float = 10.0
    """Wall time; past it the whole call (its session, or its PID namespace) is killed."""
    memory_bytes: int = 1 << 30
    """Address space of each process (RLIMIT_AS)."""
    call_memory_bytes: int | None = None
    """Resident private memory of all the processes of an isolated call together, measured every
    `WATCH_SECONDS`; past it the call is killed ("memory limit"). None: not watched."""
    processes: int = 64
    """Processes of the call (RLIMIT_NPROC; not set when neither isolated nor root: see `launcher_spec`)."""
    file_bytes: int = 16 << 20
    """Largest file a call may write (RLIMIT_FSIZE; SIGXFSZ beyond)."""
    disk_bytes: int | None = None
    """Size of the episode's `work/` (`workdir.tree_bytes`), measured every `WATCH_SECONDS`; past it the call
    is killed ("disk limit"). None: not watched."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_bytes: int = 1 << 16
    """stdout and stderr read together; past it the call is killed."""


class CallResult(NamedTuple):
    """What a call did: its exit code (negative: killed by that signal), its output, and why it was stopped
    ("" when it exited by itself; "wall time", "output limit", "memory limit" or "disk limit" when the
    sandbox killed it)."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stopped: str
    seconds: float


def clean_env(home: str) -> dict[str, str]:
    """The call's environment: none of the parent's variables, HOME and TMPDIR set for the call."""
    bin_dir = os.path.dirname(PYTHON)
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp" if home == "/work" else home,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def launcher_spec(
    argv: list[str], episode_dir: Path, limits: Limits, isolate: bool, run_as: int | None = None
) -> dict:
    """The launcher's instructions. RLIMIT_NPROC counts every process of a uid (per user namespace) and
    binds no root process, so it is set where the call's uid counts only the call: isolated (a user
    namespace of its own) or `run_as` (a root worker's unused uid for the episode); a non-root worker's call
    without isolation would share the count of all the worker's processes, so there it is not set."""
    rlimits = {
        "cpu_seconds": limits.cpu_seconds,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        "open_files": limits.open_files,
        "processes": limits.processes if isolate or run_as is not None else None,
    }
    work = episode_dir / "work"
    return {
        "isolate": isolate,
        "root": str(episode_dir / "root"),
        "work": str(work),
        "python_home": PYTHON_HOME,
        "limits": rlimits,
        "run_as": run_as,
        "argv": argv,
        "env": clean_env("/work" if isolate else str(work)),
    }


def command(
    argv: list[str], episode_dir: Path, limits: Limits, isolate: bool, run_as: int | None = None
) -> list[str]:
    """The full command line of a call: [unshare ...] python -I -S launcher.py SPEC."""
    spec = json.dumps(launcher_spec(argv, episode_dir, limits, isolate, run_as))
    user = () if os.geteuid() == 0 else USER_NAMESPACE
    prefix = [shutil.which("unshare") or "unshare", *user, *UNSHARE] if isolate else []
    return [*prefix, PYTHON, "-I", "-S", LAUNCHER, spec]


def run_call(
    argv: list[str], episode_dir: Path, limits: Limits, isolate: bool, run_as: int | None = None
) -> CallResult:
    """Run `argv` in `episode_dir/work` under `limits` (as uid `run_as`, which must own that directory,
    when given); never raises for anything the call does."""
    start = time.monotonic()
    proc = subprocess.Popen(
        command(argv, episode_dir, limits, isolate, run_as),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: killpg reaches all of it, and none of ours
        close_fds=True,
        env=clean_env(str(episode_dir / "work")),
    )
    watch = _watcher(proc.pid, episode_dir / "work", limits, isolate)
    try:
        out, err, stopped = _read_bounded(proc, start + limits.wall_seconds, limits.output_bytes, watch)
    finally:
        _kill_session(proc)
    return CallResult(proc.wait(), out, err, stopped, time.monotonic() - start)


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the call's first process has exited, without reaping it (its group id stays ours)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _watcher(pid: int, work: Path, limits: Limits, isolate: bool) -> Callable[[], str]:
    """The check of a running call: "disk limit", "memory limit" (isolated calls: the processes of the PID
    namespace that `unshare`, process `pid`, made), or "" while within its limits."""
    own = os.readlink("/proc/self/ns/pid")

    def watch() -> str:
        if limits.disk_bytes is not None and tree_bytes(work, limits.disk_bytes) > limits.disk_bytes:
            return "disk limit"
        if not isolate or limits.call_memory_bytes is None:
            return ""
        try:
            ns = os.readlink(f"/proc/{pid}/ns/pid_for_children")
        except OSError:  # exited
            return ""
        if ns != own and namespace_memory(ns) > limits.call_memory_bytes:  # == own: not unshared yet
            return "memory limit"
        return ""

    return watch


def namespace_memory(ns: str) -> int:
    """Resident private memory, bytes, of the processes in PID namespace `ns` (a /proc/PID/ns/pid link)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") != ns:
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as f:
                _, resident, shared, *_ = f.read().split()
        except (OSError, ValueError):  # gone, or a kernel thread
            continue
        total += (int(resident) - int(shared)) * PAGE  # RssAnon: what a fill holds
    return total


def _read_bounded(
    proc: subprocess.Popen, deadline: float, budget: int, watch: Callable[[], str]
) -> tuple[bytes, bytes, str]:
    """Read stdout and stderr until both close, the first process exits (then drain briefly), the
    deadline passes ("wall time"), more than `budget` bytes came ("output limit") or `watch` names a
    limit the call passed."""
    assert proc.stdout is not None and proc.stderr is not None
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total, stopped, exit_seen, next_watch = 0, "", None, time.monotonic()
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                stopped = "wall time"
                break
            if exit_seen is None and _exited(proc):
                exit_seen = now
            if exit_seen is not None and now - exit_seen > 0.2:  # a leftover child holds the pipe
                break
            if now >= next_watch:
                stopped, next_watch = watch(), now + WATCH_SECONDS
                if stopped:
                    break
            for key, _ in sel.select(min(0.05, deadline - now)):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                    continue
                chunks[key.fd].append(data)
                total += len(data)
            if total > budget:
                stopped = "output limit"
                break
    out, err = (b"".join(chunks[f.fileno()]) for f in (proc.stdout, proc.stderr))
    proc.stdout.close()
    proc.stderr.close()
    return out[:budget], err[: max(0, budget - len(out))], stopped


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the call's process group (an isolated call's PID namespace dies with its first process)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@functools.cache
def isolation_available() -> tuple[bool, str]:
    """(whether isolated calls work here, why not): runs `true` isolated once per process."""
    import tempfile

    if shutil.which("unshare") is None:
        return False, "the `unshare` program (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="roll-sandbox-probe-") as tmp:
        for name in ("root", "work"):
            (Path(tmp) / name).mkdir()
        result = run_call(["true"], Path(tmp), Limits(wall_seconds=10.0), isolate=True)
    if result.exit_code == 0:
        return True, ""
    why = (result.stderr or result.stdout).decode(errors="replace").strip()[-300:]
    return False, f"unshare of user, network, PID and mount namespaces failed here: {why or result.stopped}"
