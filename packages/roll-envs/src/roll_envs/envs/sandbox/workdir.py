"""`Workdir`: an episode's temporary directory, and the text an agent sees of a call's output.

The directory holds `work/` (the calls' working directory and HOME: the task's files and whatever the
calls write) and `root/` (the empty mount point of an isolated call's root). It is removed when the env
resets or closes, or when the `Workdir` is garbage-collected; a deep copy copies the files.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _remove(path: str) -> None:
    """Remove a tree the calls may have left unreadable (mode 000 directories)."""

    def unlock(func: Any, failed: str, exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            os.chmod(failed, stat.S_IRWXU)
            func(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


ENTRY_BYTES = 4096
"""What an entry of the episode's directory counts at least (one block), so many empty files add up too."""


def tree_bytes(path: Path, limit: int) -> int:
    """The disk `path` takes: each entry's allocated blocks, at least `ENTRY_BYTES`, links not followed;
    the walk stops past `limit`. A directory the calls made unreadable is opened up (u+rwx) to be counted,
    and counts as over `limit` if it cannot be."""
    total, stack = 0, [str(path)]
    while stack and total <= limit:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except PermissionError:
            try:
                os.chmod(folder, stat.S_IRWXU)
                entries = list(os.scandir(folder))
            except OSError:
                return limit + 1
        except FileNotFoundError:  # removed while walked
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += max(info.st_blocks * 512, ENTRY_BYTES)
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
    return total


def episode_uid() -> int | None:
    """A root worker's uid for an episode's isolated calls: one no account uses, so that RLIMIT_NPROC (which
    root ignores) counts that episode's processes alone; None for a worker that is not root."""
    return 1_000_000_000 + secrets.randbelow(1_000_000_000) if os.geteuid() == 0 else None


class Workdir:
    """An episode's directory (see the module docstring); `run_as`, when given, owns `work/`."""

    def __init__(self, run_as: int | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="roll-sandbox-"))
        self.run_as = run_as
        (self.path / "root").mkdir()
        self.work.mkdir()
        self._own(self.work)
        self._finalizer = weakref.finalize(self, _remove, str(self.path))

    @property
    def work(self) -> Path:
        """The calls' working directory and HOME."""
        return self.path / "work"

    def _own(self, path: Path) -> None:
        if self.run_as is not None:
            os.chown(path, self.run_as, self.run_as)

    def write(self, files: Mapping[str, str]) -> None:
        """Write `files` (relative path -> text) under `work/`."""
        for name, text in files.items():
            target = self.work / name
            target.write_text(text, encoding="utf-8")
            self._own(target)

    def close(self) -> None:
        """Remove the directory (idempotent)."""
        self._finalizer()

    def __deepcopy__(self, memo: dict[int, Any]) -> Workdir:
        copy = Workdir(self.run_as)
        shutil.copytree(self.work, copy.work, symlinks=True, dirs_exist_ok=True)
        for folder, dirs, files in os.walk(copy.work):
            for name in dirs + files:
                if self.run_as is not None:
                    os.lchown(os.path.join(folder, name), self.run_as, self.run_as)
        return copy


def signal_name(code: int) -> str:
    """What ended a call that exited with `code` (negative: killed by a signal; 128 + n: the shell's and
    the sandbox's way to say signal n), or "" for an ordinary exit."""
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    return {
        9: "killed (SIGKILL: the hard CPU time limit, or out of memory)",
        24: "CPU time limit (SIGXCPU)",
        25: "file size limit (SIGXFSZ)",
        11: "segmentation fault (SIGSEGV)",
        6: "aborted (SIGABRT)",
        15: "terminated (SIGTERM)",
    }.get(number, f"killed by signal {number}" if number else "")


_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n\t]")


def _escape(char: str) -> str:
    return char if char.isprintable() or char in "\n\t" else char.encode("unicode_escape").decode("ascii")


def show_bytes(data: bytes) -> str:
    """Output as text: invalid UTF-8 as `\\xNN`, characters that do not print (control, format, unassigned;
    newline and tab kept) as their escapes."""
    text = data.decode("utf-8", errors="backslashreplace").replace("\r\n", "\n")
    return _NOT_PLAIN.sub(lambda m: _escape(m.group()), text)


def cut(text: str, budget: int) -> str:
    """`text` within `budget` characters: its head and tail around a `[... N chars cut]` note."""
    if len(text) <= budget:
        return text
    keep = max(0, budget - 32)
    head, tail = text[: keep * 2 // 3], text[len(text) - (keep - keep * 2 // 3) :] if keep else ""
    return f"{head}\n[... {len(text) - len(head) - len(tail)} chars cut]\n{tail}"
