"""Rollout benchmarks P1, P2, P3, P5 (see rollout_bench.py); `rollout_table.py` prints them side by side.

    uv run pytest benchmarks/test_bench_rollout.py --benchmark-enable -m "not slow or slow"

In the default run (benchmarks disabled) each measurement runs once at a small size as a smoke test of
the benchmark itself; with `--benchmark-enable` they run at the issue's sizes.
"""

from __future__ import annotations

import pytest
import rollout_bench as rb


@pytest.fixture(scope="module")
def tokenizer():
    return rb.tiny_tokenizer()


def full(benchmark) -> bool:
    """Whether timing is on (the issue's sizes) or this is the default run's smoke test."""
    return not benchmark.disabled


def test_bench_p1_in_process_loop(benchmark, tokenizer):
    envs = 256 if full(benchmark) else 16
    m = benchmark.pedantic(rb.p1_in_process_loop, args=(tokenizer, envs, 1), rounds=1, iterations=1)
    assert m.value > 0


def test_bench_p1_roll_in_process(benchmark, tokenizer):
    envs = 256 if full(benchmark) else 16
    m = benchmark.pedantic(rb.p1_roll, args=(tokenizer, envs, 2, False), rounds=1, iterations=1)
    assert m.value > 0 and m.detail["steps"] > 0


@pytest.mark.ray
@pytest.mark.slow
def test_bench_p1_roll_ray_and_lockstep(benchmark, tokenizer):
    envs = 256 if full(benchmark) else 16

    def both():
        return rb.p1_roll(tokenizer, envs, 2, True), rb.p1_lockstep_ray(tokenizer, envs, 1, hosts=4)

    roll, lockstep = benchmark.pedantic(both, rounds=1, iterations=1)
    benchmark.extra_info.update({"roll_env_steps_s": roll.value, "lockstep_env_steps_s": lockstep.value})
    assert roll.value > 0 and lockstep.value > 0


def test_bench_p2_stragglers(benchmark, tokenizer):
    trajectories = 512 if full(benchmark) else 32
    server = rb.ServerModel() if full(benchmark) else rb.ServerModel(slots=4, median_s=0.002)

    def both():
        return rb.p2_roll(tokenizer, trajectories, server_model=server), rb.p2_lockstep(
            tokenizer, trajectories, server
        )

    roll, lockstep = benchmark.pedantic(both, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {"roll_s": roll.value, "lockstep_s": lockstep.value, "roll_of_bound": roll.detail["of_bound"]}
    )
    assert roll.detail["turns"] > 0 and lockstep.detail["turns"] > 0


@pytest.mark.slow
def test_bench_p5_generation(benchmark):
    concurrent, turns = (64, 256) if full(benchmark) else (4, 8)
    m = benchmark.pedantic(rb.p5_generation, args=(concurrent, turns), rounds=1, iterations=1)
    assert m.value > 0


@pytest.mark.slow
@pytest.mark.ray
def test_bench_p3_pipeline_async_vs_sync_under_ray(benchmark):
    if not full(benchmark):
        pytest.skip("the pipeline benchmark runs only with --benchmark-enable (e2e tests cover the pipeline)")
    sync, asynchronous = benchmark.pedantic(
        lambda: (rb.p3_pipeline(0), rb.p3_pipeline(1)), rounds=1, iterations=1
    )
    benchmark.extra_info.update({"sync_s_per_step": sync.value, "async_s_per_step": asynchronous.value})
    assert sync.value > 0 and asynchronous.value > 0
