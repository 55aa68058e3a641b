"""`freeze_startup_heap`: keep the garbage collector's full passes off the objects a rollout process starts with.

A rollout process holds a few hundred thousand objects from its imports (torch, transformers, the tokenizer)
before its first episode. CPython's full collection walks all of them; a rollout's trajectories, alive for a
batch, trigger one every few batches, and at ~0.25 s each on a shared core that is about a third of an
in-process rollout's time (docs/benchmarks.md, P1 profile). After one `gc.collect()` (so no garbage is kept),
`gc.freeze()` moves those objects to the permanent generation: later passes walk only what the rollout made.
Once per process; nothing happens while the collector is disabled.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_frozen = False


def freeze_startup_heap() -> bool:
    """Collect, then freeze every object alive now, the first time it is called in this process; returns
    whether it froze (False: done before, or the collector is disabled)."""
    global _frozen
    with _lock:
        if _frozen or not gc.isenabled():
            return False
        _frozen = True
        gc.collect()
        gc.freeze()
        return True
