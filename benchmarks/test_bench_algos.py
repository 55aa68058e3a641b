"""Benchmarks of the hot roll_algos paths (run as plain tests by default; `--benchmark-enable` to time).

- GAE: the vectorised estimator (loop over token positions, vectorised across trajectories) against a
  plain per-token Python loop, on a multi-turn row batch;
- GiGPO on 100k step rows (grouping by trajectory, env group and anchor state);
- packing and dynamic batching on a realistic multi-turn length mix, printing padding fractions.

    uv run pytest benchmarks/test_bench_algos.py --benchmark-enable -s
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from roll_algos import (
    AdvantageConfig,
    AdvantageInputs,
    balance_partitions,
    compute_advantages,
    dynamic_micro_batches,
    pack_sequences,
)
from roll_algos.packing import pack_lengths


def multi_turn_rows(num_traj: int, max_turns: int, width: int, resp: int, seed: int = 0) -> AdvantageInputs:
    """Rows of num_traj trajectories (1..max_turns turns), each row `width` tokens, `resp` response tokens."""
    rng = np.random.default_rng(seed)
    turns = rng.integers(1, max_turns + 1, num_traj)
    traj = np.repeat(np.arange(num_traj), turns)
    step = np.concatenate([np.arange(n) for n in turns])
    b = int(traj.shape[0])
    mask = torch.zeros(b, width, dtype=torch.bool)
    mask[:, width - resp :] = True
    token_rewards = torch.zeros(b, width)
    step_rewards = torch.tensor(rng.integers(0, 2, b), dtype=torch.float32)
    token_rewards[:, -1] = step_rewards
    scores = torch.zeros(num_traj).index_add_(0, torch.tensor(traj), step_rewards)
    return AdvantageInputs(
        response_mask=mask,
        token_rewards=token_rewards,
        episode_scores=scores[traj],
        step_rewards=step_rewards,
        trajectory_ids=torch.tensor(traj),
        group_ids=torch.tensor(traj // 8),
        step_ids=torch.tensor(step),
        anchor_ids=torch.tensor(rng.integers(0, 6, b)),
        values=torch.tensor(rng.normal(size=(b, width)), dtype=torch.float32),
    )


def gae_python_loop(inp: AdvantageInputs, gamma: float, lambd: float) -> torch.Tensor:
    """The obvious loop: per trajectory, per token, backwards (prompt tokens skipped)."""
    mask = inp.response_mask.tolist()
    rewards, values = inp.token_rewards.tolist(), inp.values.tolist()
    rows: dict[int, list[int]] = {}
    for r, (t, s) in enumerate(zip(inp.trajectory_ids.tolist(), inp.step_ids.tolist(), strict=True)):
        rows.setdefault(t, []).append((s, r))
    adv = [[0.0] * len(mask[0]) for _ in mask]
    for members in rows.values():
        seq = [(r, c) for _, r in sorted(members) for c, m in enumerate(mask[r]) if m]
        last, next_v = 0.0, 0.0
        for r, c in reversed(seq):
            delta = rewards[r][c] + gamma * next_v - values[r][c]
            last = delta + gamma * lambd * last
            adv[r][c] = last
            next_v = values[r][c]
    return torch.tensor(adv)


def test_bench_gae_vectorised_vs_loop(benchmark):
    inp = multi_turn_rows(num_traj=128, max_turns=6, width=256, resp=48)
    cfg = AdvantageConfig(gamma=0.99, lambd=0.95, norm_mode="none")
    t0 = time.perf_counter()
    slow = gae_python_loop(inp, 0.99, 0.95)
    loop_s = time.perf_counter() - t0
    out = benchmark(compute_advantages, "gae", inp, cfg)
    t0 = time.perf_counter()
    for _ in range(5):
        compute_advantages("gae", inp, cfg)
    vec_s = (time.perf_counter() - t0) / 5
    torch.testing.assert_close(out.advantages, slow, rtol=1e-4, atol=1e-4)
    rows, tokens = inp.response_mask.shape[0], int(inp.response_mask.sum())
    print(
        f"\nGAE {rows} rows / {tokens} response tokens: loop {loop_s * 1e3:.1f} ms, "
        f"vectorised {vec_s * 1e3:.2f} ms, speedup {loop_s / vec_s:.0f}x"
    )
    benchmark.extra_info.update(loop_ms=loop_s * 1e3, vectorised_ms=vec_s * 1e3, speedup=loop_s / vec_s)


def test_bench_gigpo_100k_step_rows(benchmark):
    inp = multi_turn_rows(num_traj=20_000, max_turns=9, width=4, resp=2)
    rows = inp.response_mask.shape[0]
    assert rows >= 90_000
    if rows > 100_000:
        inp = AdvantageInputs(*(x[:100_000] if isinstance(x, torch.Tensor) else x for x in inp))
    else:  # top up to exactly 100k rows with single-turn trajectories
        extra = multi_turn_rows(num_traj=100_000 - rows, max_turns=1, width=4, resp=2, seed=1)
        shift = {"trajectory_ids": 10**6, "group_ids": 10**6}
        inp = AdvantageInputs(
            *(
                None if a is None else torch.cat([a, b + shift[name] if name in shift else b])
                for name, a, b in zip(AdvantageInputs._fields, inp, extra, strict=True)
            )
        )
    assert inp.response_mask.shape[0] == 100_000
    cfg = AdvantageConfig(gamma=0.95)
    out = benchmark(compute_advantages, "gigpo", inp, cfg)
    t0 = time.perf_counter()
    compute_advantages("gigpo", inp, cfg)
    took = time.perf_counter() - t0
    assert torch.isfinite(out.advantages).all()
    print(f"\nGiGPO 100k step rows: {took * 1e3:.0f} ms")
    benchmark.extra_info["ms"] = took * 1e3


def multi_turn_lengths(num_traj: int = 256, seed: int = 0) -> list[int]:
    """Row lengths of a multi-turn batch: each turn's row holds the whole context so far plus its response.

    system prompt ~ 180 tokens, each turn adds an observation (40-120) and a response (10-150, long tail);
    trajectories have 1-10 turns (geometric-ish: many short episodes, a few long ones).
    """
    rng = np.random.default_rng(seed)
    lengths = []
    for _ in range(num_traj):
        turns = min(10, 1 + int(rng.geometric(0.25)))
        context = 180 + int(rng.integers(0, 40))
        for _ in range(turns):
            context += int(rng.integers(40, 120))
            response = int(min(150, 10 + rng.exponential(35)))
            lengths.append(context + response)
            context += response
    return lengths


@pytest.fixture(scope="module")
def lengths() -> list[int]:
    return multi_turn_lengths()


def test_bench_packing(benchmark, lengths):
    capacity = 4096
    seqs = [np.zeros(n, dtype=np.int64) for n in lengths]
    packed = benchmark(pack_sequences, seqs, capacity)
    naive = 1 - sum(lengths) / (len(lengths) * max(lengths))
    ffd_rows = len(pack_lengths(lengths, capacity, "ffd"))
    print(
        f"\n{len(lengths)} rows, lengths {min(lengths)}..{max(lengths)} (mean {np.mean(lengths):.0f}); "
        f"padding naive {naive:.1%}, packed into {packed.input_ids.shape[0]} x {capacity} "
        f"{packed.padding_fraction:.1%} (bfd; ffd {ffd_rows} rows; lower bound "
        f"{-(-sum(lengths) // capacity)} rows)"
    )
    benchmark.extra_info.update(naive_padding=naive, packed_padding=packed.padding_fraction)


def test_bench_dynamic_batching(benchmark, lengths):
    plan = benchmark(dynamic_micro_batches, lengths, 16384, 8)
    ranks = balance_partitions(lengths, 4, equal_size=False)
    loads = [sum(lengths[i] for i in r) for r in ranks]
    print(
        f"\ndynamic micro-batches (16384 tokens, pad to 8): {len(plan.micro_batches)} micro-batches, "
        f"padding naive {plan.naive_padding_fraction:.1%} -> dynamic {plan.padding_fraction:.1%}, "
        f"removed_padding_ratio {plan.removed_padding_ratio:.1%}; "
        f"4-rank Karmarkar-Karp loads {min(loads)}..{max(loads)} tokens"
    )
    assert plan.padding_fraction < plan.naive_padding_fraction
    assert max(loads) - min(loads) <= max(lengths)
    benchmark.extra_info.update(
        dynamic_padding=plan.padding_fraction, naive_padding=plan.naive_padding_fraction
    )
