"""Freed tensor memory given back to the OS: glibc's malloc told to map large blocks on their own, and trimmed.

torch allocates CPU tensors with malloc. glibc serves a block at or above its mmap threshold with a mapping of
its own, unmapped when freed; smaller blocks come from heap arenas (one per allocating thread, up to 8 per
core), which keep them once freed, for reuse. The threshold starts at 128 KiB but rises to the size of every
mapped block freed, up to 32 MiB, so after the first large tensor is freed nearly every tensor of a
few-hundred-MB model (weight copies, gradients, activations, the weight-sync staging) comes from an arena. A
step's transients are freed into the arenas of whichever threads ran it (in-process workers run on asyncio's
thread pool) and stay resident; the next step's land partly elsewhere. No Python object or tensor is left
behind (the live tensors keep their count and bytes from step to step): the growth is all freed memory.

`configure_allocator()` (every role worker calls it when built) fixes the threshold at `MMAP_THRESHOLD_BYTES`,
so every block of 1 MiB or more is a mapping of its own and leaves the resident set when freed; the smaller
blocks that remain are trimmed once a step by `release_freed_memory()` (glibc's `malloc_trim(0)`), which the
pipeline calls on every worker process.

Measured on SmolLM2-135M in one process (`cluster.backend=local`, 16 rows a step, 10 steps, 2-core machine):

| | resident after steps 2-10 | peak within a step | system CPU a step |
|---|---|---|---|
| as glibc leaves it (`ROLL_MALLOC_TUNING=0`) | 6.7 GB -> 9.7 GB, growing (heap: 1.0 GB used, 6.2 GB freed) | 7.1 -> 10.1 GB | 0.4-1.1 s |
| trim once a step only | 3.4 GB, flat | 6.0-6.6 GB | 1.3-1.9 s |
| threshold 4 MiB + trim | 3.4 GB, flat | 5.7-6.1 GB | 1.4-2.3 s |
| threshold 1 MiB + trim (the default) | 3.4 GB, flat | 5.2-5.4 GB, flat | 2.7-3.5 s |

(user CPU 15-19 s a step in every case). The mapped blocks cost page faults each time they are allocated: about
12% more CPU time on that run, for the flattest and lowest peak. The run as configured (64 rows, validation every
5 steps) grows from 6 GB to 11.7 GB over 45 steps without them, and holds 3.4-3.5 GB after each of 12 steps with
them, peak 5.2-5.5 GB.

`ROLL_MALLOC_TUNING=0` in the environment turns both off; a `MALLOC_MMAP_THRESHOLD_` set there is glibc's own
setting and is left as it is (the trim still runs), e.g. `MALLOC_MMAP_THRESHOLD_=4194304` for fewer page faults
and a higher peak. Elsewhere than glibc (macOS, musl) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "TUNING_ENV",
    "HeapStats",
    "ProcessMemory",
    "configure_allocator",
    "heap_stats",
    "release_freed_memory",
]

MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of at least this many bytes get a mapping of their own (returned to the OS when freed). 1 MiB: every
large tensor (a layer's weights or activations), while the many small blocks stay on the heap, where allocating
costs no system call."""

TUNING_ENV = "ROLL_MALLOC_TUNING"
"""Set to 0 (or false, off, no) to leave glibc's malloc as it is: no fixed mmap threshold, no trim."""

_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers, <malloc.h>


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True)
class HeapStats:
    """What glibc's malloc holds (`mallinfo2`), in bytes."""

    in_use: int
    """Allocated from the heap arenas, not freed."""
    free: int
    """Freed blocks the arenas keep (resident unless trimmed: what fragmentation costs)."""
    mapped: int
    """Blocks with a mapping of their own (large ones), in use."""


@dataclass(frozen=True)
class ProcessMemory:
    """A worker process's memory after `release_freed_memory` (picklable: it travels back from Ray actors)."""

    pid: int
    """The process (in-process workers share one: count it once)."""
    rss_bytes: int
    """Its resident set after the release (0 where /proc cannot be read)."""


def tuning_enabled() -> bool:
    """False when `ROLL_MALLOC_TUNING` turns the tuning off."""
    return os.environ.get(TUNING_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


@functools.cache
def _libc() -> Any:
    """glibc, or None (another C library, or another OS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None  # musl and others: no malloc_trim
    return libc


def configure_allocator(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes for this process (it also stops glibc raising it; calling
    it again is harmless). Returns whether it was set: False off glibc, with `ROLL_MALLOC_TUNING=0`, or when the environment
    sets `MALLOC_MMAP_THRESHOLD_` (glibc read that one at start-up)."""
    libc = _libc()
    if libc is None or not tuning_enabled() or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def release_freed_memory() -> ProcessMemory:
    """Give the heap arenas' free pages back to the OS (`malloc_trim(0)`, every arena; a no-op off glibc or with
    `ROLL_MALLOC_TUNING=0`); return this process's memory afterwards."""
    libc = _libc()
    if libc is not None and tuning_enabled():
        libc.malloc_trim(0)
    return ProcessMemory(os.getpid(), _rss_bytes())


def heap_stats() -> HeapStats | None:
    """What glibc's malloc holds now, or None (not glibc, or one older than 2.33, without `mallinfo2`)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return HeapStats(in_use=int(info.uordblks), free=int(info.fordblks), mapped=int(info.hblkhd))


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
