"""The scheduler and env workers, in-process, on a scripted env (no Ray, no model)."""

from __future__ import annotations

import asyncio

import pytest
from roll_rollout import (
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    GenerateResult,
    RolloutScheduler,
    SamplingSettings,
    SchedulerError,
    validation_seeds,
)


class CountdownEnv:
    """Ends after `seed % 3 + 1` steps; reward 1 per step; `broken` envs raise in step."""

    instruction = "count"

    def __init__(self, broken=False):
        self.broken = broken

    def reset(self, seed=None, options=None):
        self.left = seed % 3 + 1
        self.seed = seed
        return f"left {self.left}", {}

    def step(self, action):
        if self.broken:
            raise RuntimeError("env exploded")
        self.left -= 1
        info = {
            "action_is_valid": True,
            "action_is_effective": True,
            "success": self.left == 0,
            "metrics": {"steps_left": float(self.left)},
        }
        return f"left {self.left}", 1.0, self.left == 0, False, info

    def close(self):
        pass


class ScriptedPolicy:
    def __init__(self, text_ids):
        self.text_ids = text_ids
        self.requests = 0

    async def generate(self, request):
        self.requests += 1
        return GenerateResult(list(self.text_ids), [0.0] * len(self.text_ids), "stop", 0)


def make_scheduler(chat_tokenizer, layout, policy, broken_env_ids=()):
    workers = []
    made = iter(range(layout.num_envs))
    for w in range(layout.num_workers):
        slots = [
            EnvSlotSpec(e, layout.tag_of_group(e // layout.group_size), "countdown", max_turns=5)
            for e in layout.env_ids_of_worker(w)
        ]
        worker = EnvWorker(
            slots, chat_tokenizer, policy, env_factory=lambda t, c: CountdownEnv(next(made) in broken_env_ids)
        )
        workers.append(worker.run_episodes)
    sampling = {tag: SamplingSettings(max_new_tokens=4) for tag in layout.tags}
    return RolloutScheduler(layout, workers, sampling, seed=3)


def test_get_batch_returns_whole_groups_sharing_a_seed(chat_tokenizer):
    layout = EnvLayout(4, 3, ("A", "B"), (3, 1), max_env_num_per_worker=5)
    assert layout.num_workers == 3
    policy = ScriptedPolicy(chat_tokenizer.encode("Left", add_special_tokens=False))
    sched = make_scheduler(chat_tokenizer, layout, policy)
    trajs = asyncio.run(sched.get_batch(12))
    assert [t.env_id for t in trajs] == list(range(12))
    for g in range(4):
        group = [t for t in trajs if t.group_id == g]
        assert len(group) == 3 and len({t.seed for t in group}) == 1
        assert {t.tag for t in group} == {"A" if g < 3 else "B"}
        for t in group:
            assert len(t.turns) == t.seed % 3 + 1 and t.success and t.terminated
            assert t.metrics["num_actions"] == len(t.turns)
    assert policy.requests == sum(len(t.turns) for t in trajs)
    seeds = sched.next_seeds(2)
    assert all(s < validation_seeds(1)[0] for s in seeds)


def test_rng_state_round_trip(chat_tokenizer):
    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    sched = make_scheduler(chat_tokenizer, layout, ScriptedPolicy([1]))
    state = sched.rng_state()
    first = sched.next_seeds(3)
    sched.set_rng_state(state)
    assert sched.next_seeds(3) == first


def test_a_crashing_env_marks_its_trajectory_and_spares_the_others(chat_tokenizer):
    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    sched = make_scheduler(chat_tokenizer, layout, ScriptedPolicy([1]), broken_env_ids={1})
    trajs = asyncio.run(sched.get_batch(4))
    assert len(trajs) == 4
    assert "env exploded" in trajs[1].error
    assert [t.error for t in trajs if t.env_id != 1] == [None, None, None]
    assert all(t.success for t in trajs if t.env_id != 1)


def test_layout_and_batch_errors(chat_tokenizer):
    with pytest.raises(SchedulerError, match="sums to"):
        EnvLayout(4, 2, ("A",), (3,), 4)
    with pytest.raises(SchedulerError, match="same length"):
        EnvLayout(4, 2, ("A", "B"), (4,), 4)
    layout = EnvLayout(2, 2, ("A",), (2,), 4)
    sched = make_scheduler(chat_tokenizer, layout, ScriptedPolicy([1]))
    with pytest.raises(SchedulerError, match="multiple of group_size"):
        asyncio.run(sched.get_batch(3))
    with pytest.raises(SchedulerError, match="only 2 env groups"):
        asyncio.run(sched.get_batch(6))
