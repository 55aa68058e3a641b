"""`LoopWatch`: an env worker whose event loop an inline env call froze is ended, never left frozen.

A call that runs inline (`roll_rollout.hosting.call_pace`: an env class declaring `never_blocks = True`) runs on the
worker's event loop, where no timeout can end it. If the class's promise is false and the call hangs, every
slot of the worker, and its polls, wait with it. A watch thread per worker (`EnvCalls`) therefore notes each
inline call's start; one still running `FROZEN_GRACE_S` after `timeout_s` (the call timeout: the call has
failed whatever it returns; the grace lets a call that merely overran return and fail as a timeout) is reported with its env class, its call and the event loop thread's stack, and `on_frozen` is
called with that message. The default, `end_process`, logs it and ends the process: under Ray the env
worker's actor dies and the scheduler replaces the worker (its episodes replayed, `max_worker_restarts`
counting); in-process the run ends with that message instead of hanging (its event loop is frozen anyway).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

_log = logging.getLogger(__name__)

FROZEN_EXIT_CODE = 75
"""The exit status of a process `end_process` ends (EX_TEMPFAIL: the replaced worker may well run on)."""

FROZEN_GRACE_S = 1.0
"""How long past the call timeout an inline call may still run before its worker counts as frozen."""

CHECK_EVERY_S = 1.0
"""The longest sleep of the watch thread between two looks (a quarter of a shorter timeout)."""


def end_process(message: str) -> None:
    """Log `message` (and print it to stderr, which outlives a logging setup) and end the process at once:
    the frozen event loop cannot run a cleaner exit."""
    _log.critical("%s", message)
    print(message, file=sys.stderr, flush=True)
    os._exit(FROZEN_EXIT_CODE)


class LoopWatch:
    """Watches the inline env calls of one worker (`begin` / `end` around each); see the module docstring."""

    def __init__(
        self,
        timeout_s: float,
        on_frozen: Callable[[str], None] = end_process,
        grace_s: float = FROZEN_GRACE_S,
    ) -> None:
        self.timeout_s = timeout_s
        self.frozen_after_s = timeout_s + grace_s
        self.on_frozen = on_frozen
        self._call: tuple[str, str, float, int] | None = None  # what, env class, began, thread: one at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, what: str, env_class: str) -> None:
        """An inline call of `env_class` starts on this thread (the event loop's)."""
        self._call = (what, env_class, time.monotonic(), threading.get_ident())
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="roll-loop-watch", daemon=True)
            self._thread.start()

    def end(self) -> None:
        """The inline call returned (or raised)."""
        self._call = None

    def stop(self) -> None:
        """End the watch thread (the worker closes)."""
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(min(CHECK_EVERY_S, self.frozen_after_s / 4)):
            call = self._call
            if call is not None and time.monotonic() - call[2] > self.frozen_after_s:
                self._call = None  # reported once
                self.on_frozen(self._message(*call))

    def _message(self, what: str, env_class: str, began: float, thread: int) -> str:
        frame = sys._current_frames().get(thread)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(gone)\n"
        return (
            f"{what} of env class {env_class} has run on the env worker's event loop for "
            f"{time.monotonic() - began:.1f} s, past env_step_timeout_s={self.timeout_s:g}: the class declares "
            "(or inherits) never_blocks = True, but this call blocks, and no timeout can end a call on the event "
            f"loop, so every env of the worker waits with it. Its stack:\n{stack}Ending the env worker (the "
            f"scheduler replaces it). Fix: remove never_blocks = True from {env_class} (or set it False): its "
            "calls then run in the thread pool under their timeout."
        )
