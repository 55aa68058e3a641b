"""`TrainerOffloader`: trained roles on actor_infer's GPUs move their state to CPU memory while it samples.

One step with offloaded roles (`config.colocation.offloaded_roles`): rollout and validation run with the roles'
parameters, gradients, fp32 masters and optimiser state in CPU memory -> `reload` (after the engine sleeps,
before experience: old / reference log-probs, values, the critic and actor updates) -> weight sync -> `offload`
(before the next rollout). Each worker's `offload` / `reload` is its strategy's (`roll_strategies.train.offload`;
DeepSpeed's own `offload_states` at ZeRO 1-3). A role whose strategy cannot offload (`offload_unavailable`: a
hf_infer reference, DeepSpeed ZeRO-0) stays on its GPU, and the reason is logged once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from roll_pipeline.runtime.ranks import RankGroup

__all__ = ["TrainerOffloader"]


class TrainerOffloader:
    """Offloads and reloads the role groups of `groups` (role name -> its ranks) as one."""

    def __init__(self, groups: Mapping[str, RankGroup], log: Callable[[str], None]) -> None:
        self.groups = dict(groups)
        self._log = log
        self._checked = False
        self.offloaded = False

    async def _usable(self) -> dict[str, RankGroup]:
        """The groups whose workers can offload (asked once; the others are logged and dropped)."""
        if not self._checked:
            self._checked = True
            names = list(self.groups)
            reasons = await asyncio.gather(*(self.groups[n].call_main("offload_unavailable") for n in names))
            for name, reason in zip(names, reasons, strict=True):
                if reason is not None:
                    self._log(
                        f"[roll] {name} shares GPUs with actor_infer but cannot offload ({reason}); it stays"
                    )
                    del self.groups[name]
        return self.groups

    async def _call(self, method: str) -> tuple[float, list[Any]]:
        groups = await self._usable()
        started = time.perf_counter()
        per_group = await asyncio.gather(*(group.call_all(method) for group in groups.values()))
        return time.perf_counter() - started, [report for reports in per_group for report in reports]

    async def offload(self) -> dict[str, float]:
        """Move the roles' state to CPU memory (idempotent); returns time/offload_s, memory/offloaded_gb (bytes
        moved, all ranks) and memory/offload_gpu_freed_gb (torch.cuda.memory_allocated freed, all ranks)."""
        if not self.groups or self.offloaded:
            return {}
        seconds, reports = await self._call("offload")
        self.offloaded = True
        if not reports:
            return {}
        return {
            "time/offload_s": seconds,
            "memory/offloaded_gb": sum(r.bytes_moved for r in reports) / 2**30,
            "memory/offload_gpu_freed_gb": sum(r.gpu_freed_bytes for r in reports) / 2**30,
        }

    async def reload(self) -> dict[str, float]:
        """Move the roles' state back to their GPUs before they compute; returns time/reload_s."""
        if not self.offloaded:
            return {}
        seconds, reports = await self._call("reload")
        self.offloaded = False
        return {"time/reload_s": seconds} if reports else {}
