"""The scheduler test matrix: batch sizes x async_generation_ratio x StarPO-S filter x redundancy.

In-process workers, a scripted policy with deterministic latency, envs whose episode length varies
with the seed. Each case runs several steps of (get_batch, simulated training, version bump) and checks
exact batch sizes, whole groups, the tag mix, the staleness bound, that no episode is delivered twice,
and that the ledger accounts for every dispatched episode.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections import Counter

import pytest
from roll_rollout import OUTCOMES, EnvLayout, SchedulerSettings
from roll_rollout.testing import ScriptedPolicy, countdown_factory

GROUP_SIZE = 3
PARTITION = {"A": 3, "B": 1}
STEPS = 4
BATCHES = {"one_group": 1, "several": 2, "all_groups": 4, "fewer_than_all_two_tags": 3}


def top_std(scores, keep):
    """Reference StarPO-S filter: the `keep` groups of largest score std (ties: earlier group)."""
    stds = [statistics.pstdev(s) for s in scores]
    return sorted(range(len(scores)), key=lambda i: (-stds[i], i))[:keep]


async def run_case(scheduler_factory, answer_ids, batch_groups, ratio, keep, redundancy):
    layout = EnvLayout(4, GROUP_SIZE, tuple(PARTITION), tuple(PARTITION.values()), 5, redundancy)
    policy = ScriptedPolicy(answer_ids, latency=lambda r: 0.001 * (len(r.prompt_ids) % 4 + 1))
    scheduler = scheduler_factory(
        layout,
        policy,
        env_factory=countdown_factory(min_turns=1, spread=4, reward_noise=1.0),
        seed=7,
        settings=SchedulerSettings(async_generation_ratio=ratio, filter_keep_fraction=keep),
        group_filter=top_std if keep < 1 else None,
    )
    batches, versions = [], []
    for step in range(STEPS):
        batch = await scheduler.get_batch(batch_groups * GROUP_SIZE)
        batches.append(batch)
        versions.append(scheduler.policy_version)
        before = policy.requests
        await asyncio.sleep(0.02)  # "training"
        if ratio == 0:
            assert policy.requests == before, "the synchronous mode generated while the trainer trained"
        policy.version = step + 1
        scheduler.set_policy_version(step + 1)
    await scheduler.stop()
    return scheduler, batches, versions


@pytest.mark.parametrize("redundancy", [0, 2])
@pytest.mark.parametrize("keep", [1.0, 0.5])
@pytest.mark.parametrize("ratio", [0, 1, 2, 7])
@pytest.mark.parametrize("batch", list(BATCHES))
def test_scheduler_matrix(scheduler_factory, answer_ids, batch, ratio, keep, redundancy):
    batch_groups = BATCHES[batch]
    scheduler, batches, versions = asyncio.run(
        run_case(scheduler_factory, answer_ids, batch_groups, ratio, keep, redundancy)
    )
    seen_episodes, seen_groups = set(), set()
    given: Counter[str] = Counter()
    for k, (b, version) in enumerate(zip(batches, versions, strict=True)):
        trajs = b.trajectories
        assert len(trajs) == batch_groups * GROUP_SIZE  # exact size
        groups: dict[int, list] = {}
        for t in trajs:
            groups.setdefault(t.group_id, []).append(t)
        for members in groups.values():  # whole groups: group_size episodes of one seed and tag
            assert len(members) == GROUP_SIZE
            assert len({t.seed for t in members}) == 1 and len({t.tag for t in members}) == 1
            assert len({t.env_id for t in members}) == GROUP_SIZE
            assert all(t.error is None and t.turns for t in members)
        per_tag = Counter(members[0].tag for members in groups.values())
        for tag, count in PARTITION.items():  # tag mix: floor or ceil of the exact share ...
            share = batch_groups * count / sum(PARTITION.values())
            assert math.floor(share) <= per_tag[tag] <= math.ceil(share)
            given[tag] += per_tag[tag]
            exact = (k + 1) * share  # ... and the running total within one group of the exact one
            assert abs(given[tag] - exact) <= 1.0
        for t in trajs:  # staleness bound
            assert all(turn.policy_version >= version - ratio for turn in t.turns)
            assert all(turn.policy_version <= version for turn in t.turns)
        ids = {t.episode_id for t in trajs}
        assert len(ids) == len(trajs) and not ids & seen_episodes  # no episode twice
        assert not set(groups) & seen_groups
        seen_episodes |= ids
        seen_groups |= set(groups)
        if keep < 1:
            assert (
                b.metrics.get("rollout/filtered_groups", 0) == math.ceil(batch_groups / keep) - batch_groups
            )
    # nothing lost: every dispatched episode has exactly one outcome, deliveries match what we received
    ledger = scheduler.ledger.total
    assert set(ledger) <= set(OUTCOMES)
    assert sum(ledger.values()) == scheduler.dispatched
    assert ledger["delivered"] == len(seen_episodes)
    assert ledger["failed"] == ledger["lost"] == 0


def test_the_filter_keeps_the_groups_of_largest_reward_std(scheduler_factory, answer_ids):
    """The delivered groups are the top ones by score std among the collected candidates."""

    chosen_sets = []

    def recording_filter(scores, keep):
        kept = top_std(scores, keep)
        chosen_sets.append(([statistics.pstdev(s) for s in scores], kept))
        return kept

    async def run():
        layout = EnvLayout(4, GROUP_SIZE, ("A",), (4,), 12)
        scheduler = scheduler_factory(
            layout,
            ScriptedPolicy(answer_ids),
            env_factory=countdown_factory(reward_noise=1.0),
            settings=SchedulerSettings(filter_keep_fraction=0.25),
            group_filter=recording_filter,
        )
        batch = await scheduler.get_batch(GROUP_SIZE)
        await scheduler.stop()
        return batch

    batch = asyncio.run(run())
    (stds, kept) = chosen_sets[0]
    assert len(stds) == 4 and kept == [max(range(4), key=lambda i: stds[i])]
    delivered_std = statistics.pstdev([t.score for t in batch.trajectories])
    assert delivered_std == pytest.approx(max(stds))
    assert batch.metrics["rollout/filtered_groups"] == 3
