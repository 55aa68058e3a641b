"""P4: the train path's micro-batches on a real multi-turn length mix: naive padding vs dynamic batching
vs packing, padding fraction and train tokens/s of each.

The length mix: FrozenLake (4x4, up to 8 turns) and Sokoban (6x6, up to 12 turns) episodes played with
random moves through the rollout's own `PromptBuilder` and the tiny model's tokenizer, prompts keeping
the whole history, trained as StarPO trajectory rows (`sample_shape=trajectory`) or as step rows.
Each mode runs the real `HFTrainStrategy.train_step` with the pipeline's `ActorLoss` over one mini-batch
holding every row:

- naive: fixed micro-batches of `rows` rows, every one padded to the longest row of the batch;
- fixed: the same micro-batches, each trimmed to its own longest row (the pipeline's default);
- dynamic: length-sorted micro-batches under a token budget (`use_dynamic_batching_in_train`);
- packed: rows packed into sequences of the longest row's length, micro-batches under the same budget
  (`use_sequence_packing`).

    uv run python benchmarks/train_table.py          # the table of docs/benchmarks.md (P4)
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

import roll_envs
import torch
from roll_pipeline.assembly.settings import actor_loss
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.models.recipes import TINY_FROZEN_LAKE_INSTRUCTION
from roll_pipeline.trainer.micro_batches import build_micro_batches
from roll_pipeline.trainer.micro_plan import TrainLayout
from roll_pipeline.trainer.samples import Samples, build_samples
from roll_rollout import PromptBuilder, Trajectory, Turn

ENVS = {"frozen_lake": ({}, 8), "sokoban": ({"dim_x": 6, "dim_y": 6, "num_boxes": 1}, 12)}


def tiny_model_path() -> str:
    """The builtin tiny model (built once, cached)."""
    return str(resolve_pretrain("builtin:tiny-frozen-lake"))


def play(tokenizer, env_type: str, seed: int) -> Trajectory:
    """One episode with random moves; every turn's prompt keeps the whole history (token-in/token-out)."""
    config, turns = ENVS[env_type]
    env = roll_envs.make(env_type, **config)
    rng = random.Random(seed)
    builder = PromptBuilder(tokenizer, TINY_FROZEN_LAKE_INSTRUCTION, max_history_turns=None)
    obs, _ = env.reset(seed=seed)
    traj = Trajectory(env_id=seed, group_id=seed // 8, episode_id=seed, tag=env_type, seed=seed)
    observations, responses = [obs], []
    for _ in range(turns):
        prompt = builder.prompt(observations, responses)
        ids = tokenizer.encode(f"<answer>{rng.choice(env.valid_actions)}</answer>", add_special_tokens=False)
        obs, reward, terminated, truncated, _ = env.step(tokenizer.decode(ids))
        traj.turns.append(Turn(prompt, ids, [-1.0] * len(ids), float(reward), True, True, observations[-1]))
        observations.append(obs)
        responses.append(ids)
        if terminated or truncated:
            break
    env.close()
    return traj


def length_mix(tokenizer, episodes_per_env: int) -> list[Trajectory]:
    """FrozenLake and Sokoban episodes, interleaved."""
    return [play(tokenizer, env, seed) for seed in range(episodes_per_env) for env in ENVS]


@dataclass
class Result:
    """One mode's numbers."""

    mode: str
    micro_batches: int
    real_tokens: int
    slots: int
    seconds: float
    cpu_seconds: float

    @property
    def padding(self) -> float:
        """Fraction of computed token slots that are padding."""
        return 1.0 - self.real_tokens / self.slots

    @property
    def tokens_per_s(self) -> float:
        """Real (non-padding) tokens trained per second of wall time."""
        return self.real_tokens / self.seconds

    @property
    def tokens_per_cpu_s(self) -> float:
        """Real tokens trained per CPU second of the process (steadier than wall time on a shared machine)."""
        return self.real_tokens / self.cpu_seconds


def fields_of(samples: Samples) -> dict[str, torch.Tensor]:
    """The loss inputs of every row (advantages random: the cost does not depend on them)."""
    g = torch.Generator().manual_seed(0)
    mask = samples.response_mask
    return {
        "input_ids": samples.input_ids,
        "attention_mask": samples.attention_mask,
        "response_mask": mask,
        "segment_ids": samples.segment_ids,
        "old_log_probs": samples.infer_log_probs,
        "advantages": torch.randn(mask.shape, generator=g) * mask,
    }


def micro_batches(samples: Samples, mode: str, rows: int, budget: int) -> tuple[list[dict], int]:
    """The micro-batches of `mode` over every row, and the token slots they compute."""
    fields = fields_of(samples)
    order = torch.randperm(samples.num_rows, generator=torch.Generator().manual_seed(1))
    layout = TrainLayout("fixed" if mode == "naive" else mode, rows, samples.num_rows, budget, 8)
    (mbs,), stats = build_micro_batches(fields, order, layout, "seq-mean-token-mean")  # one rank
    if mode != "naive":
        return mbs, stats.padded_tokens
    width = samples.input_ids.shape[1]
    for mb in mbs:  # pad every micro-batch back to the batch's longest row
        for key, value in list(mb.items()):
            if value.dim() == 2 and value.shape[1] < width:
                mb[key] = torch.nn.functional.pad(value, (0, width - value.shape[1]))
    return mbs, samples.num_rows * width


MODES = ("naive", "fixed", "dynamic", "packed")


def run(
    episodes_per_env: int = 64,
    shape: str = "trajectory",
    rows: int = 16,
    budget: int = 8192,
    repeats: int = 3,
) -> tuple[list[Result], dict[str, float]]:
    """Every mode on the same samples, round-robin `repeats` times after one warm-up each (so every mode
    meets the same load); min wall time per mode. Returns the results and the length statistics."""
    from roll_strategies import HFTrainStrategy, OptimizerSettings

    strategy = HFTrainStrategy(tiny_model_path(), optimizer=OptimizerSettings(learning_rate=1e-3))
    samples = build_samples(length_mix(strategy.tokenizer, episodes_per_env), 0, shape)  # type: ignore[arg-type]
    lengths = samples.lengths.tolist()
    info = {
        "rows": float(len(lengths)),
        "min": float(min(lengths)),
        "median": float(statistics.median(lengths)),
        "max": float(max(lengths)),
    }
    loss_fn = actor_loss(tiny_config(skip_confident_tokens=None), 0.0)
    plans = {mode: micro_batches(samples, mode, rows, budget) for mode in MODES}
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    for rep in range(repeats + 1):
        for mode in MODES:
            t, c = time.perf_counter(), time.process_time()
            strategy.train_step(
                plans[mode][0], loss_fn, with_entropy=True, lr_scale=0.0
            )  # lr 0: alike repeats
            if rep:  # the first round warms up
                times[mode].append(time.perf_counter() - t)
                cpu[mode].append(time.process_time() - c)
    real = int(samples.attention_mask.sum())
    results = [Result(m, len(plans[m][0]), real, plans[m][1], min(times[m]), min(cpu[m])) for m in MODES]
    return results, info
