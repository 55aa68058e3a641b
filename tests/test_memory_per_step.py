"""Memory per step: an in-process run keeps nothing of a step once it is over.

In a `cluster.backend=local` run every worker is an object of this process, so after each step a garbage
collection and a count of the live torch tensors (every worker's: weights, optimiser state, anything a step left
behind) and of the rollout's trajectories and turns show what the run retains. Past the first step (lazy state:
the optimiser's moments, the LM head's probe) the tensors' count and bytes are the same at every step, and the
episodes alive stay below three batches' worth: a tensor kept per step (a list of batches, a cache keyed by step, a
loss holding its autograd graph) or a trajectory kept per step fails it, in steps, not seconds. What glibc keeps of the freed memory, which grows the resident set from step to step, is
`roll_strategies.workers.allocator`'s (its tests, packages/roll-strategies/tests/test_allocator.py); here each step
reports the resident set after giving it back (`memory/rss_gb`).
"""

from __future__ import annotations

import gc
import json
import warnings
from contextlib import closing
from pathlib import Path

import pytest
import torch
from roll_pipeline import AgenticPipeline
from roll_pipeline.config.compose import compose
from roll_rollout import Trajectory, Turn
from small_runs import FEW_WORKERS, SMALL_FROZEN_LAKE

STEPS = 6


def live_objects() -> tuple[int, int, int]:
    """(live torch tensors, their bytes, live trajectories + turns) after a full collection."""
    gc.collect()
    objects = gc.get_objects()
    with warnings.catch_warnings():  # isinstance on torch.distributed's deprecated reduce_op warns
        warnings.simplefilter("ignore", FutureWarning)
        tensors = [o for o in objects if isinstance(o, torch.Tensor)]
        episodes = sum(isinstance(o, (Trajectory, Turn)) for o in objects)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return len(tensors), nbytes, episodes


class CountingPipeline(AgenticPipeline):
    """The pipeline, counting what is alive at the end of every step."""

    def __init__(self, *args, **kwargs) -> None:
        self.live: list[tuple[int, int, int]] = []
        super().__init__(*args, **kwargs)

    async def _train_step(self) -> dict[str, float]:
        metrics = await super()._train_step()
        self.live.append(live_objects())
        return metrics


@pytest.mark.slow
def test_a_local_run_retains_no_tensor_or_trajectory_from_step_to_step(tmp_path: Path):
    cfg = compose(
        None,
        None,
        [
            *SMALL_FROZEN_LAKE,
            *FEW_WORKERS,
            f"output_dir={tmp_path}",
            "exp_name=memory",
            "cluster.backend=local",
            "async_generation_ratio=0",  # lockstep: no episode of the next step is in flight at the count
            f"max_steps={STEPS}",
            f"eval_steps={STEPS}",
            f"save_steps={STEPS}",
        ],
    )
    with closing(CountingPipeline(cfg, progress=False)) as pipeline:
        pipeline.run()
    assert len(pipeline.live) == STEPS
    tensors = [(count, nbytes) for count, nbytes, _ in pipeline.live]
    assert tensors[1][0] > 0 and tensors[1][1] > 0
    assert tensors[1:] == [tensors[1]] * (STEPS - 1), tensors  # the same after every step from the second on
    # Besides the batch just trained, the next step's episodes may be under way (env workers start them as soon
    # as they are free) and finished ones not yet handed over (a done task holds its result): 98 objects, 2.45
    # batches, were seen on a loaded machine. A trajectory kept per step would pass STEPS batches by the end.
    per_batch = cfg.train_rollout_batch_size * (1 + cfg.custom_envs["FrozenLake"].max_actions_per_traj)
    assert max(episodes for *_, episodes in pipeline.live) <= 3 * per_batch < STEPS * per_batch, pipeline.live
    rows = [json.loads(line) for line in (tmp_path / "memory" / "metrics.jsonl").read_text().splitlines()]
    rss = [r["memory/rss_gb"] for r in rows if r["step"] > 0]
    assert len(rss) == STEPS and all(0 < gb < 64 for gb in rss)  # this process's resident set, once a step
