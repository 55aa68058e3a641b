"""`EnvLayout` slot arithmetic with redundancy, and `TagMix` against an exact-share reference."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_rollout import EnvLayout, TagMix, envs_per_worker


def test_slots_groups_and_workers_with_redundancy():
    layout = EnvLayout(3, 4, ("A", "B"), (2, 1), max_env_num_per_worker=5, group_size_redundancy=2)
    assert layout.slots_per_group == 6 and layout.num_envs == 18 and layout.num_workers == 4
    assert list(layout.env_ids_of_group(1)) == list(range(6, 12))
    assert [layout.group_of_env(e) for e in (0, 5, 6, 17)] == [0, 0, 1, 2]
    assert list(layout.groups_of_tag("A")) == [0, 1] and list(layout.groups_of_tag("B")) == [2]
    hosted = [e for w in range(layout.num_workers) for e in layout.env_ids_of_worker(w)]
    assert hosted == list(range(18))
    assert all(layout.worker_of_env(e) == w for w in range(4) for e in layout.env_ids_of_worker(w))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    partition=st.lists(st.integers(0, 6), min_size=1, max_size=4).filter(lambda p: sum(p) > 0),
    batches=st.lists(st.integers(1, 9), min_size=1, max_size=12),
)
def test_tag_mix_gives_floor_or_ceil_and_tracks_the_exact_share(partition, batches):
    tags = {f"t{i}": n for i, n in enumerate(partition)}
    mix = TagMix(tags)
    total = sum(partition)
    given_so_far = dict.fromkeys(tags, 0)
    asked = 0
    for groups in batches:
        split = mix.split(groups)
        assert sum(split.values()) == groups
        asked += groups
        for tag, count in tags.items():
            exact = Fraction(groups * count, total)
            got = split.get(tag, 0)
            assert math.floor(exact) <= got <= math.ceil(exact)
            given_so_far[tag] += got
            assert abs(given_so_far[tag] - Fraction(asked * count, total)) <= 1
    state = mix.state()
    fresh = TagMix(tags)
    fresh.set_state(state)
    assert fresh.split(5) == mix.split(5)


@pytest.mark.parametrize(
    ("num_envs", "cpus", "expected_workers"),
    [(256, 2, 2), (256, 16, 4), (128, 2, 2), (100, 1, 1), (8, 2, 1), (1000, 3, 3), (65, 64, 2)],
)
def test_default_worker_size_gives_no_more_workers_than_cpus(num_envs, cpus, expected_workers):
    # brute force: the smallest worker count of ceil(num_envs / 64) and cpus, each worker as even as can be
    size = envs_per_worker(num_envs, None, cpus)
    workers = -(-num_envs // size)
    assert workers == expected_workers
    assert size >= 64 or workers == -(-num_envs // 64)
    assert (workers - 1) * size < num_envs <= workers * size  # no empty worker


def test_requested_worker_size_is_kept():
    assert envs_per_worker(256, 16, cpus=1) == 16
