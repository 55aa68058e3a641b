"""Rows that share prefixes, for `test_prefix_tree*.py`; also one data-parallel rank of their DP=2 check.

The row builders return input_ids / attention_mask / response_mask [B, T] (right or left padding):
- `one_turn_group`: 8 samples of one prompt, responses of different lengths;
- `step_wise`: multi-turn steps of two episodes, each step's prompt the episode's whole history so far
  (nested prefixes: a deeper trie), the response only the step's last turn;
- `trajectory_wise`: whole trajectories of one prompt, every turn's response in the response mask (gaps);
- `two_groups`: two prompts of different lengths, four samples each, in one micro-batch.

As a script (`python prefix_ranks.py RANK WORLD PORT MODEL_DIR OUT_FILE MODE...`) it runs one train step of
`MODE` (hf_train, zero2) with share_prefix on this rank's half of `step_wise` + `one_turn_group` rows and
saves the metrics, this rank's gradients (hf_train) and the weights after the step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

LO, HI = 8, 200  # token ids drawn in [LO, HI): inside every test model's vocabulary, clear of special ids
OPTIMIZER_ARGS = {"learning_rate": 0.1, "eps": 1.0}
"""AdamW whose first step, lr * g / (|g| + eps), is smooth in g at eps 1 (at 1e-8 it is about lr * sign(g), which
turns float noise in near-zero gradients into differences of up to lr): weights after a step compare tightly."""


def _tokens(gen: torch.Generator, n: int) -> list[int]:
    return torch.randint(LO, HI, (n,), generator=gen).tolist()


def pad(rows: list[tuple[list[int], list[bool]]], left: bool = False) -> dict[str, torch.Tensor]:
    """(tokens, is-response per token) rows, padded to the longest at the right or the left."""
    width = max(len(t) for t, _ in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    resp = torch.zeros_like(ids, dtype=torch.bool)
    for r, (tokens, response) in enumerate(rows):
        start = width - len(tokens) if left else 0
        ids[r, start : start + len(tokens)] = torch.tensor(tokens)
        mask[r, start : start + len(tokens)] = 1
        resp[r, start : start + len(tokens)] = torch.tensor(response)
    return {"input_ids": ids, "attention_mask": mask, "response_mask": resp}


def _group(gen: torch.Generator, prompt: list[int], lengths: list[int]) -> list[tuple[list[int], list[bool]]]:
    return [(prompt + _tokens(gen, n), [False] * len(prompt) + [True] * n) for n in lengths]


def one_turn_group(
    seed: int = 0, left: bool = False, rows: int = 8, prompt: int = 10
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = [1 + (i * 5) % 7 for i in range(rows)]
    return pad(_group(gen, _tokens(gen, prompt), lengths), left)


def two_groups(seed: int = 0, left: bool = False) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rows = _group(gen, _tokens(gen, 6), [3, 5, 2, 4]) + _group(gen, _tokens(gen, 13), [4, 1, 6, 3])
    return pad(rows, left)


def step_wise(seed: int = 0, left: bool = False) -> dict[str, torch.Tensor]:
    """Two episodes of three steps under one system prompt; step k's row is the history + its response."""
    gen = torch.Generator().manual_seed(seed)
    system = _tokens(gen, 5)
    rows = []
    for _episode in range(2):
        history = system + _tokens(gen, 4)  # the first observation
        for _step in range(3):
            response = _tokens(gen, int(torch.randint(2, 5, (1,), generator=gen)))
            rows.append((history + response, [False] * len(history) + [True] * len(response)))
            history = history + response + _tokens(gen, 3)  # the next observation
    return pad(rows, left)


def trajectory_wise(seed: int = 0, left: bool = False) -> dict[str, torch.Tensor]:
    """Four trajectories of one prompt: response turns and observations alternate, all responses trained."""
    gen = torch.Generator().manual_seed(seed)
    prompt = _tokens(gen, 7)
    rows = []
    for r in range(4):
        tokens, response = list(prompt), [False] * len(prompt)
        for _turn in range(1 + r % 3):
            turn, obs = _tokens(gen, 3), _tokens(gen, 2)
            tokens += turn + obs
            response += [True] * len(turn) + [False] * len(obs)
        rows.append((tokens, response))
    return pad(rows, left)


CASES = {
    "one_turn_group": one_turn_group,
    "step_wise": step_wise,
    "trajectory_wise": trajectory_wise,
    "two_groups": two_groups,
}


def weighted_nll(log_probs, entropy, mb):
    """A loss reading every response token with its own weight (mb["adv"]), plus entropy and exact KL when
    present; the same function of the outputs whatever forward produced them."""
    m = mb["response_mask"].float()
    loss = -(log_probs * mb["adv"] * m).sum() / m.sum()
    if entropy is not None:
        loss = loss - 0.01 * (entropy * m).sum() / m.sum()
    if "full_kl" in mb:
        loss = loss + 0.1 * (mb["full_kl"] * m).sum() / m.sum()
    return loss, {"nll": float(loss.detach())}


def dp_batch() -> dict[str, torch.Tensor]:
    """The DP check's mini-batch: step-wise episodes and a one-turn group, right-padded to one width."""
    a, b = step_wise(7), one_turn_group(8)
    width = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    out = {}
    for key in a:
        parts = [torch.nn.functional.pad(x[key], (0, width - x[key].shape[1])) for x in (a, b)]
        out[key] = torch.cat(parts)
    out["adv"] = torch.randn(out["input_ids"].shape, generator=torch.Generator().manual_seed(9))
    return out


def rank_micro_batches(rank: int, world: int) -> list[dict[str, torch.Tensor]]:
    """This rank's rows (every world-th one, so each rank's rows still share prefixes) in two micro-batches,
    each weighted by its share of the mini-batch's response tokens."""
    batch = dp_batch()
    mine = list(range(rank, batch["input_ids"].shape[0], world))
    total = float(batch["response_mask"].sum())
    half = (len(mine) + 1) // 2
    out = []
    for idx in (mine[:half], mine[half:]):
        mb = {k: v[idx] for k, v in batch.items()}
        mb["loss_scale"] = torch.tensor(float(mb["response_mask"].sum()) / total)
        out.append(mb)
    return out


def build(mode: str, model_dir: Path, share_prefix: bool, spec: Any = None) -> Any:
    """hf_train or deepspeed_train (zero2) with one optimiser step's settings."""
    from roll_strategies import OptimizerSettings, create_strategy

    common: dict[str, Any] = {
        "optimizer": OptimizerSettings(**OPTIMIZER_ARGS),
        "data_parallel": spec,
        "share_prefix": share_prefix,
    }
    if mode == "hf_train":
        return create_strategy("hf_train", "train", model_dir, **common)
    config = {"zero_optimization": {"stage": int(mode.removeprefix("zero"))}}
    return create_strategy("deepspeed_train", "train", model_dir, strategy_config=config, **common)


def capture_grads(strategy: Any) -> dict[str, torch.Tensor]:
    """Fills with every parameter's gradient as the (non-DeepSpeed) strategy's next step begins, before any
    sum over the ranks."""
    grads: dict[str, torch.Tensor] = {}
    backend = strategy.trainer
    step = backend.step

    def capturing(*args: Any, **kwargs: Any) -> Any:
        for name, p in strategy.model.named_parameters():
            grads[name] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        return step(*args, **kwargs)

    backend.step = capturing
    return grads


def run(mode: str, model_dir: Path, rank: int, world: int, share_prefix: bool, spec: Any = None) -> dict:
    """One train step of `mode` on this rank's micro-batches: metrics, gradients (hf_train), weights."""
    strategy = build(mode, model_dir, share_prefix, spec)
    grads = capture_grads(strategy) if mode == "hf_train" else {}
    metrics = strategy.train_step(rank_micro_batches(rank, world), weighted_nll, with_entropy=True)
    weights = {n: torch.from_numpy(a) for n, a in strategy.export_weights().items()}
    return {"metrics": metrics, "grads": grads, "weights": weights}


def main(argv: list[str]) -> None:
    from roll_strategies import DataParallelSpec

    rank, world, port, model_dir, out_file, *modes = argv
    torch.set_num_threads(1)
    spec = DataParallelSpec(rank=int(rank), world_size=int(world), master_port=int(port))
    results = {m: run(m, Path(model_dir), int(rank), int(world), True, spec) for m in modes}
    torch.save(results, out_file)


if __name__ == "__main__":
    main(sys.argv[1:])
