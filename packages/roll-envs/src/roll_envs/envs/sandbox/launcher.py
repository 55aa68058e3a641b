"""The first program of every sandboxed call: it builds the call's view of the system, lowers its limits and
execs the command. Run as a script (`python -I -S launcher.py SPEC`), stdlib only, never imported by the env.

With `isolate` (inside `unshare --net --pid --fork --mount`, plus `--user --map-root-user` unless the
worker is root), it mounts a new root (a read-only tmpfs holding read-only binds of /usr, a few files of
/etc, the Python install, four device files, a private /tmp and the episode's directory as /work) and
chroots into it; without, it only changes to the episode's directory. Then it drops every capability (so
the call cannot undo the mounts or leave the chroot), becomes `run_as` when given (a root worker gives each
episode an unused uid: root ignores RLIMIT_NPROC, and a uid of its own gives the episode its own count),
and, isolated, forks: it waits as the namespace's PID 1 while the command runs as its child. The command
gets the resource limits and is exec'd.

The parent must not use `preexec_fn` for this (unsafe with threads, and the env's calls run side by side in
threads), hence a separate program.
"""

import contextlib
import ctypes
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAP_VERSION_3 = 0x20080522
ETC_FILES = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "localtime", "hosts")
DEVICES = ("null", "zero", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None):
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _bind(source, target, writable=False):
    """Bind `source` on `target` (a file or a directory), read-only unless `writable`."""
    _mount(source, target, None, MS_BIND | MS_REC)
    if not writable:  # a user namespace may not clear a host mount's noexec: keep it
        noexec = MS_NOEXEC if os.statvfs(source).f_flag & os.ST_NOEXEC else 0
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | noexec)


def _touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a"):
        pass


def build_root(root, work, python_home):
    """Mount the call's root on `root` (see the module docstring) and chroot into it, cwd /work."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for name in ("bin", "sbin", "lib", "lib32", "lib64"):
        host = "/" + name
        if os.path.islink(host):  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(host), f"{root}/{name}")
        elif os.path.isdir(host):
            os.makedirs(f"{root}/{name}")
            _bind(host, f"{root}/{name}")
    for host in ("/usr", python_home):
        if os.path.isdir(host) and not os.path.exists(root + host):
            os.makedirs(root + host)
            _bind(host, root + host)
    for name in ETC_FILES:
        if os.path.isfile(f"/etc/{name}"):
            _touch(f"{root}/etc/{name}")
            _bind(f"/etc/{name}", f"{root}/etc/{name}")
    os.makedirs(f"{root}/dev")
    for name in DEVICES:
        _touch(f"{root}/dev/{name}")
        _mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        os.symlink(f"/proc/self/fd/{fd}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    for name in ("proc", "tmp", "work"):
        os.makedirs(f"{root}/{name}")
    _bind(work, f"{root}/work", writable=True)
    _mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    with contextlib.suppress(OSError):  # a container may forbid a new /proc; the calls work without it
        _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    os.chroot(root)
    os.chdir("/work")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges(last_cap, run_as):
    """Empty the capability bounding and ambient sets, become `run_as` (uid and gid, no groups) when given,
    empty the remaining capability sets, and forbid gaining privileges on exec (setuid files)."""
    for cap in range(last_cap + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if run_as is not None:
        os.setgroups([])
        os.setresgid(run_as, run_as, run_as)
        os.setresuid(run_as, run_as, run_as)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(_CapHeader(CAP_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")


def set_limits(limits):
    """The call's resource limits: CPU seconds, address space, processes, file size, open files, no core."""
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU first, SIGKILL a second later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("processes"):
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)


def wait_as_init(child):
    """PID 1 of the namespace: wait for the command, exit with its status (128 + the signal that killed
    it, as shells report). The kernel ignores SIGXCPU and SIGXFSZ sent to a namespace's PID 1, so the
    command runs as its child; the namespace's other processes die when this one exits."""
    while True:
        pid, status = os.waitpid(-1, 0)  # reaps orphans too
        if pid == child:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def main():
    spec = json.loads(sys.argv[1])
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    if spec["isolate"]:
        build_root(spec["root"], spec["work"], spec["python_home"])
    else:
        os.chdir(spec["work"])
    drop_privileges(last_cap, spec["run_as"])
    if spec["isolate"]:
        child = os.fork()
        if child:
            wait_as_init(child)
    set_limits(spec["limits"])
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # the parent shows this as the call's stderr
        sys.stderr.write(f"sandbox: could not start the call: {exc}\n")
        sys.exit(125)
