"""An env class that itself declares `never_blocks = True` and then hangs: its inline call freezes the worker's
event loop, where no timeout can end it. The loop watch ends the worker with a message naming the class, the
call and its stack, and the fix (`roll_rollout.hosting.loop_watch`), instead of the worker freezing silently."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from roll_envs import FrozenLakeEnv
from roll_rollout.hosting.loop_watch import FROZEN_EXIT_CODE, LoopWatch

HANG_S = 30.0
"""How long the lying env's step waits: past this the child would end on its own (today's code: it did)."""


class LyingLake(FrozenLakeEnv):
    """FrozenLake that declares both hints on its own class, and whose third step waits `HANG_S`."""

    owns_random_state = True
    never_blocks = True

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.elapsed_steps == 2:
            threading.Event().wait(HANG_S)
        return super().step(action)


def _child() -> None:
    """One episode of `LyingLake` in an in-process `EnvWorker` with a 1 s call timeout."""
    sys.path.insert(0, str(Path(__file__).parent))
    import msgpack
    from roll_rollout import EnvCallLimits, EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings
    from roll_rollout.hosting.worker import encode_jobs
    from roll_rollout.testing import ScriptedPolicy

    from conftest import WORDS, word_level_tokenizer

    tokenizer = word_level_tokenizer(["\n", "_", "P", "O", "G", "X", "√", ".", ",", ":", *WORDS])
    answer = tokenizer.encode("<answer> Right </answer>", add_special_tokens=False)
    worker = EnvWorker(
        [EnvSlotSpec(0, "lake", "lake", max_turns=6)],
        tokenizer,
        ScriptedPolicy([*answer, tokenizer.eos_token_id]),
        env_factory=lambda _t, _c: LyingLake(is_slippery=False, size=8, max_steps=6),
        limits=EnvCallLimits(env_step_timeout_s=1.0, backup_after_s=0),
    )

    async def play() -> None:
        await worker.submit(encode_jobs([EpisodeJob(0, 0, 0, 0, SamplingSettings(max_new_tokens=8))]))
        while not msgpack.unpackb(await worker.poll(0.01))["done"]:
            pass

    asyncio.run(play())
    print("episode over", flush=True)


def test_a_class_that_declares_never_blocks_and_hangs_ends_its_worker_with_the_fix():
    """The child's third step hangs inline (its first two ran fast: the pace sends the next call inline);
    the watch ends the child a second or two after the 1 s timeout, naming the class, the call, its stack
    and the fix. Without it the child sits in the hang for `HANG_S`, then ends normally."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, timeout=HANG_S + 30, check=False
    )
    took = time.monotonic() - began
    assert done.returncode == FROZEN_EXIT_CODE, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert took < HANG_S, took
    message = done.stderr
    assert "step of env class LyingLake" in message and "remove never_blocks = True from LyingLake" in message
    assert "threading.Event().wait(HANG_S)" in message  # the stack shows where it hangs
    assert "episode over" not in done.stdout


def test_the_watch_reports_a_call_running_past_the_timeout_once():
    reports: list[str] = []
    watch = LoopWatch(0.2, on_frozen=reports.append, grace_s=0.0)
    try:
        watch.begin("env 'A' step", "Quick")
        watch.end()  # a call that returned is never reported
        time.sleep(0.4)
        assert reports == []
        watch.begin("env 'A' step", "Stuck")
        time.sleep(0.6)
        assert len(reports) == 1 and "env 'A' step of env class Stuck" in reports[0]
        assert "time.sleep(0.6)" in reports[0]  # this thread's stack
    finally:
        watch.stop()


if __name__ == "__main__":
    _child()
