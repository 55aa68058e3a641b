"""`InferSleeper`: the colocated inference engine sleeps while the trainer runs, and wakes before the sync.

One step with a vllm actor_infer on the GPUs of a trained role (`config.colocation.infer_sleep`): rollout ->
`before_training` (the policy server lets the requests in flight finish, holds new ones, and puts the
engine to sleep: its KV cache freed, its weights offloaded or dropped per `sleep_level`) -> experience and
updates -> `before_weight_sync` (the engine wakes, requests are let in) -> weight sync -> the next rollout.
Where the engine cannot sleep (`PolicyServer.sleep` returns False: vLLM's CPU build, a platform without
sleep mode) the step goes on awake, and the reason is logged once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from roll_pipeline.config.colocation import InferSleep

__all__ = ["InferSleeper"]

ServerCall = Callable[..., Awaitable[Any]]
"""`call(method, *args)` on the policy server (e.g. `partial(cluster.call, policy_server)`)."""


class InferSleeper:
    """Puts the policy server's engine to sleep for the training phase when `plan` says so."""

    def __init__(self, plan: InferSleep, call: ServerCall, log: Callable[[str], None]) -> None:
        self.plan = plan
        self._call = call
        self._log = log
        self.asleep = False
        self._told = False

    async def before_training(self) -> dict[str, float]:
        """Sleep (after the rollout, before experience and updates); returns time/step_infer_sleep."""
        if not self.plan.enabled or self.asleep:
            return {}
        started = time.perf_counter()
        self.asleep = bool(await self._call("sleep"))
        if not self.asleep and not self._told:
            reason = await self._call("sleep_unavailable")
            self._log(
                f"[roll] actor_infer shares GPUs with {list(self.plan.shared_with)}, but its engine cannot sleep"
                f" ({reason}); it keeps its memory while they train"
            )
            self._told = True
        return {"time/step_infer_sleep": time.perf_counter() - started} if self.asleep else {}

    async def before_weight_sync(self) -> dict[str, float]:
        """Wake up (before the weight sync that precedes the next rollout); returns time/step_infer_wake."""
        if not self.asleep:
            return {}
        started = time.perf_counter()
        try:
            await self._call("wake_up")
        finally:
            self.asleep = False
        return {"time/step_infer_wake": time.perf_counter() - started}
